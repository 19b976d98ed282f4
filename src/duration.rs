//! Kubernetes `metav1.Duration` values, which are Go `time.ParseDuration` strings ("1m30s",
//! "0", "1.5h", "-2s"). Ported rule for rule so that bsl-sentinel accepts exactly what Velero
//! and the apiserver's clients accept.

use std::fmt;

/// A parsed Go duration, in nanoseconds (Go's `time.Duration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GoDuration(i64);

/// Go's own message, e.g. `time: unknown unit "d" in duration "1d"`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("time: {0}")]
pub struct DurationError(String);

const UNITS: [(&str, u64); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

const LIMIT: u64 = 1 << 63;

impl GoDuration {
    pub const ZERO: GoDuration = GoDuration(0);

    pub fn from_nanos(nanos: i64) -> Self {
        GoDuration(nanos)
    }

    /// A std duration as Go prints it (saturating at Go's limit of about 292 years).
    pub fn from_std(d: std::time::Duration) -> Self {
        GoDuration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }

    pub fn nanos(self) -> i64 {
        self.0
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// The duration as a std duration; None when negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    pub fn parse(input: &str) -> Result<Self, DurationError> {
        let err = |kind: &str| DurationError(format!("{kind} {input:?}"));
        let mut s = input;
        let mut neg = false;
        if let Some(rest) = s.strip_prefix('-') {
            neg = true;
            s = rest;
        } else if let Some(rest) = s.strip_prefix('+') {
            s = rest;
        }
        if s == "0" {
            return Ok(GoDuration::ZERO);
        }
        if s.is_empty() {
            return Err(err("invalid duration"));
        }
        let mut total: u64 = 0;
        while !s.is_empty() {
            let first = s.as_bytes()[0];
            if !(first == b'.' || first.is_ascii_digit()) {
                return Err(err("invalid duration"));
            }
            let (whole, rest) = leading_int(s).ok_or_else(|| err("invalid duration"))?;
            let pre = rest.len() != s.len();
            s = rest;
            let (mut frac, mut scale, mut post) = (0u64, 1f64, false);
            if let Some(rest) = s.strip_prefix('.') {
                let (f, sc, rest2) = leading_fraction(rest);
                post = rest2.len() != rest.len();
                (frac, scale, s) = (f, sc, rest2);
            }
            if !pre && !post {
                return Err(err("invalid duration"));
            }
            let unit_len = s
                .find(|c: char| c == '.' || c.is_ascii_digit())
                .unwrap_or(s.len());
            if unit_len == 0 {
                return Err(err("missing unit in duration"));
            }
            let (name, rest) = s.split_at(unit_len);
            s = rest;
            let unit = UNITS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, u)| *u)
                .ok_or_else(|| err(&format!("unknown unit {name:?} in duration")))?;
            if whole > LIMIT / unit {
                return Err(err("invalid duration"));
            }
            let mut v = whole * unit;
            if frac > 0 {
                // Go adds the fraction in float64, truncating; so does this.
                v += (frac as f64 * (unit as f64 / scale)) as u64;
                if v > LIMIT {
                    return Err(err("invalid duration"));
                }
            }
            total = total
                .checked_add(v)
                .ok_or_else(|| err("invalid duration"))?;
            if total > LIMIT {
                return Err(err("invalid duration"));
            }
        }
        if neg {
            // -(1<<63) is representable; wrapping handles exactly that case.
            return Ok(GoDuration((total as i64).wrapping_neg()));
        }
        if total > LIMIT - 1 {
            return Err(err("invalid duration"));
        }
        Ok(GoDuration(total as i64))
    }
}

/// Consumes leading decimal digits; None on overflow past 1<<63.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut x: u64 = 0;
    for b in s[..digits].bytes() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(b - b'0');
        if x > LIMIT {
            return None;
        }
    }
    Some((x, &s[digits..]))
}

/// Consumes leading fraction digits, ignoring those past u64 precision as Go does.
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    for b in s[..digits].bytes() {
        if overflow {
            continue;
        }
        if x > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(b - b'0');
        if y > LIMIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[digits..])
}

impl fmt::Display for GoDuration {
    /// Formats like Go's `Duration.String` for whole seconds and above ("1h2m3s").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut n = self.0.unsigned_abs();
        if self.0 < 0 {
            f.write_str("-")?;
        }
        if n == 0 {
            return f.write_str("0s");
        }
        let h = n / 3_600_000_000_000;
        n %= 3_600_000_000_000;
        let m = n / 60_000_000_000;
        n %= 60_000_000_000;
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if h > 0 || m > 0 {
            write!(f, "{m}m")?;
        }
        let secs = n / 1_000_000_000;
        let sub = n % 1_000_000_000;
        if sub == 0 {
            write!(f, "{secs}s")
        } else {
            let frac = format!("{sub:09}");
            write!(f, "{secs}.{}s", frac.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> i64 {
        match GoDuration::parse(s) {
            Ok(d) => d.nanos(),
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    #[test]
    fn parses_what_go_parses() {
        const S: i64 = 1_000_000_000;
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("-0", 0),
            ("+0", 0),
            ("0s", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("-5s", -5 * S),
            ("+5s", 5 * S),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600_000_000),
            ("5.s", 5 * S),
            (".5s", S / 2),
            ("1.0s", S),
            ("1.004s", S + 4_000_000),
            ("100.00100s", 100 * S + 1_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13_000_000),
            ("14s", 14 * S),
            ("15m", 15 * 60 * S),
            ("16h", 16 * 3600 * S),
            ("3h30m", (3 * 3600 + 30 * 60) * S),
            ("1m30s", 90 * S),
            ("1.5h", 5400 * S),
            ("10.5s4m", 4 * 60 * S + 10 * S + S / 2),
            ("-2m3.4s", -(2 * 60 * S + 3 * S + 400_000_000)),
            ("39h9m14.425s", (39 * 3600 + 9 * 60 + 14) * S + 425_000_000),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * 60 * S),
            ("9007199254740993ns", 9_007_199_254_740_993),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036.854775808s", i64::MIN),
            ("0.100000000000000000000h", 6 * 60 * S),
            (
                "0.830103483285477580700h",
                49 * 60 * S + 48 * S + 372_539_827,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(ok(input), *want, "parsing {input:?}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in [
            "",
            "3",
            "-",
            "s",
            ".",
            "-.",
            ".s",
            "+.s",
            "1d",
            "\u{FFFD}",
            "9223372036854775808ns",
            "9223372036854775.808us",
            "9223372036854ms775us808ns",
            "-9223372036854775809ns",
            "1 s",
            " 1s",
            "1s ",
            "1h-30m",
            "abc",
        ] {
            assert!(GoDuration::parse(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn error_names_the_input_like_go() {
        let e = GoDuration::parse("3").err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("time: missing unit in duration \"3\""));
        let e = GoDuration::parse("1d").err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("time: unknown unit \"d\" in duration \"1d\"")
        );
    }

    #[test]
    fn displays_like_go() {
        for (n, want) in [
            (0, "0s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (-5_000_000_000, "-5s"),
            (1_500_000_000, "1.5s"),
        ] {
            assert_eq!(GoDuration::from_nanos(n).to_string(), want);
        }
    }

    #[test]
    fn negative_has_no_std_duration() {
        assert_eq!(GoDuration::from_nanos(-1).to_std(), None);
        assert_eq!(
            GoDuration::from_nanos(2_000_000_000).to_std(),
            Some(std::time::Duration::from_secs(2))
        );
    }
}
