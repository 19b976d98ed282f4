//! The inline caCert: a PEM bundle Velero hands to the plugin, which trusts every certificate
//! block Go can parse and skips the rest.

use super::report::Report;

pub(crate) const PEM_BEGIN: &str = "-----BEGIN CERTIFICATE-----";
pub(crate) const PEM_END: &str = "-----END CERTIFICATE-----";

pub(crate) fn check_ca_cert(pem: &[u8], r: &mut Report) {
    const PATH: &str = "spec.objectStorage.caCert";
    // Velero hands an empty caCert to the plugin, which ignores it.
    if pem.is_empty() {
        r.warn(PATH, "is empty and has no effect; remove it");
        return;
    }
    r.warn(
        PATH,
        "inline caCert is deprecated; prefer caCertRef to a Secret holding the CA bundle",
    );
    let text = String::from_utf8_lossy(pem);
    let (good, bad) = scan_pem(&text);
    if good == 0 {
        let twice = base64_decode(&text).is_some_and(|d| {
            d.windows(PEM_BEGIN.len())
                .any(|w| w == PEM_BEGIN.as_bytes())
        });
        let detail = if twice {
            "the PEM bundle is base64-encoded twice; encode it once"
        } else {
            "must be a PEM bundle with at least one valid -----BEGIN CERTIFICATE----- block"
        };
        r.invalid(PATH, &text, detail);
    } else if bad > 0 {
        // Go skips blocks it cannot parse, so the good certificates still work.
        r.warn(
            PATH,
            format_args!("{bad} malformed certificate block(s) will be ignored"),
        );
    }
}

/// Counts well-formed and malformed CERTIFICATE blocks. Structural only: base64 that decodes to
/// one complete DER SEQUENCE, which is what every X.509 certificate is.
fn scan_pem(text: &str) -> (usize, usize) {
    let (mut good, mut bad) = (0, 0);
    let mut rest = text;
    while let Some(start) = rest.find(PEM_BEGIN) {
        let body = &rest[start + PEM_BEGIN.len()..];
        let Some(end) = body.find(PEM_END) else {
            bad += 1;
            break;
        };
        if base64_decode(&body[..end]).is_some_and(|der| is_der_sequence(&der)) {
            good += 1;
        } else {
            bad += 1;
        }
        rest = &body[end + PEM_END.len()..];
    }
    (good, bad)
}

fn is_der_sequence(der: &[u8]) -> bool {
    let [0x30, first, rest @ ..] = der else {
        return false;
    };
    let (len, content) = if first & 0x80 == 0 {
        (usize::from(*first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return false;
        }
        let (len, content) = rest.split_at(n);
        let len = len.iter().fold(0usize, |acc, b| acc << 8 | usize::from(*b));
        (len, content)
    };
    len == content.len()
}

/// Standard base64 with padding, whitespace ignored, as in a PEM body.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let chars: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if chars.is_empty() || !chars.len().is_multiple_of(4) {
        return None;
    }
    let data = chars
        .strip_suffix(b"==")
        .or_else(|| chars.strip_suffix(b"="))
        .unwrap_or(&chars);
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in data {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6 | u32::from(v)) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use serde_json::Value;

    use super::super::testing::*;
    use super::super::validate;
    use super::*;
    use crate::bsl::BackupStorageLocationSpec;

    fn with_ca(pem: &[u8]) -> BackupStorageLocationSpec {
        let mut s = spec("aws", "b");
        s.object_storage.ca_cert = Some(ByteString(pem.to_vec()));
        s
    }

    const DEPRECATED: &str = "spec.objectStorage.caCert: inline caCert is deprecated; prefer caCertRef to a Secret holding the CA bundle";

    #[test]
    fn ca_cert_rules() {
        let pem = cert_pem();
        let r = validate(&with_ca(pem.as_bytes()));
        assert!(r.errors.is_empty(), "{r:?}");
        assert_eq!(r.warnings, [DEPRECATED]);

        let r = validate(&with_ca(b"not a certificate"));
        assert_eq!(
            messages(&r),
            [
                r#"spec.objectStorage.caCert: Invalid value: "not a certificate": must be a PEM bundle with at least one valid -----BEGIN CERTIFICATE----- block"#
            ]
        );

        let broken = format!("{PEM_BEGIN}\nMIIB!!!\n{PEM_END}\n");
        assert_eq!(
            paths(&validate(&with_ca(broken.as_bytes()))),
            ["spec.objectStorage.caCert"]
        );
        // A PEM key block is not a certificate.
        let key = "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n";
        assert_eq!(
            paths(&validate(&with_ca(key.as_bytes()))),
            ["spec.objectStorage.caCert"]
        );

        let r = validate(&with_ca(format!("{pem}{broken}").as_bytes()));
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings[1],
            "spec.objectStorage.caCert: 1 malformed certificate block(s) will be ignored"
        );

        let twice = ByteString(pem.into_bytes());
        let encoded = serde_json::to_value(&twice).ok();
        let text = encoded.as_ref().and_then(Value::as_str).unwrap_or_default();
        let r = validate(&with_ca(text.as_bytes()));
        assert!(r.errors[0].detail.contains("base64-encoded twice"), "{r:?}");

        let r = validate(&with_ca(b""));
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings,
            ["spec.objectStorage.caCert: is empty and has no effect; remove it"]
        );
    }

    #[test]
    fn der_length_must_match() {
        assert!(is_der_sequence(&[0x30, 0x01, 0x00]));
        assert!(is_der_sequence(&[0x30, 0x81, 0x01, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x02, 0x00]));
        assert!(!is_der_sequence(&[0x31, 0x01, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x80]));
        assert!(!is_der_sequence(&[0x30]));
        assert_eq!(base64_decode("TWFu"), Some(b"Man".to_vec()));
        assert_eq!(base64_decode("TW E=\n"), Some(b"Ma".to_vec()));
        assert_eq!(base64_decode("TQ=="), Some(b"M".to_vec()));
        assert_eq!(base64_decode("TQ="), None);
        assert_eq!(base64_decode("T=Q="), None);
    }

    #[test]
    fn ca_cert_and_ref_are_exclusive() {
        let mut s = with_ca(cert_pem().as_bytes());
        s.object_storage.ca_cert_ref = Some(selector(Some("ca"), "ca.crt"));
        let r = validate(&s);
        assert_eq!(
            messages(&r),
            [
                "spec.objectStorage: Forbidden: cannot specify both caCert and caCertRef in objectStorage; remove caCert and keep caCertRef"
            ]
        );
    }
}
