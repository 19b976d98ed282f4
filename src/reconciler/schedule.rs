//! When a BSL's next check is due, as Velero schedules its validations. Pure.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use jiff::Timestamp;

use crate::duration::GoDuration;

/// When the next check of a BSL is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Now,
    After(Duration),
    /// validationFrequency 0 and checked once: only a spec change brings a check.
    OnSpecChange,
}

/// Velero's timing: immediately when never validated or the spec changed (compared by
/// content, never by metadata.generation, which Velero's CRD bumps on every status write);
/// then every `frequency` after lastValidationTime; frequency 0 turns periodic checks off.
pub fn next_check(
    now: Timestamp,
    last_validation: Option<Timestamp>,
    frequency: Duration,
    spec_changed: bool,
) -> Next {
    let Some(last) = last_validation.filter(|_| !spec_changed) else {
        return Next::Now;
    };
    if frequency.is_zero() {
        return Next::OnSpecChange;
    }
    let since = now.duration_since(last).unsigned_abs();
    match frequency.checked_sub(since) {
        Some(left) if !left.is_zero() => Next::After(left),
        _ => Next::Now,
    }
}

/// spec.validationFrequency, else the server default; a negative or unparsable value falls
/// back to the default as in Velero.
pub fn frequency(validation_frequency: Option<&str>, default: Duration) -> Duration {
    validation_frequency
        .and_then(|text| GoDuration::parse(text).ok())
        .and_then(GoDuration::to_std)
        .unwrap_or(default)
}

/// Spreads periodic checks over up to a tenth of the period, stable per BSL.
pub(super) fn jitter(namespace: &str, name: &str, period: Duration) -> Duration {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (namespace, name).hash(&mut hasher);
    period.mul_f64((hasher.finish() % 1000) as f64 / 10_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap_or_default()
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn never_validated_is_checked_now_even_with_frequency_zero() {
        assert_eq!(next_check(at(0), None, MIN, false), Next::Now);
        assert_eq!(next_check(at(0), None, Duration::ZERO, false), Next::Now);
    }

    #[test]
    fn spec_change_is_checked_now() {
        assert_eq!(next_check(at(10), Some(at(5)), MIN, true), Next::Now);
        assert_eq!(
            next_check(at(10), Some(at(5)), Duration::ZERO, true),
            Next::Now
        );
    }

    #[test]
    fn periodic_check_waits_for_the_rest_of_the_period() {
        assert_eq!(
            next_check(at(20), Some(at(0)), MIN, false),
            Next::After(Duration::from_secs(40))
        );
        assert_eq!(next_check(at(60), Some(at(0)), MIN, false), Next::Now);
        assert_eq!(next_check(at(500), Some(at(0)), MIN, false), Next::Now);
    }

    #[test]
    fn frequency_zero_waits_for_a_spec_change() {
        assert_eq!(
            next_check(at(500), Some(at(0)), Duration::ZERO, false),
            Next::OnSpecChange
        );
    }

    #[test]
    fn frequency_comes_from_the_spec_else_the_default() {
        assert_eq!(frequency(Some("30s"), MIN), Duration::from_secs(30));
        assert_eq!(frequency(Some("0s"), MIN), Duration::ZERO);
        assert_eq!(frequency(Some("-5s"), MIN), MIN);
        assert_eq!(frequency(Some("soon"), MIN), MIN);
        assert_eq!(frequency(None, MIN), MIN);
    }

    #[test]
    fn jitter_is_bounded_and_spreads() {
        let spread: std::collections::HashSet<Duration> = (0..50)
            .map(|i| jitter("velero", &format!("b{i}"), MIN))
            .collect();
        assert!(spread.len() > 10);
        assert!(spread.iter().all(|j| *j < MIN / 10));
    }
}
