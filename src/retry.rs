//! Failed status writes: each BSL retried with exponential backoff and jitter from a short
//! first delay, and an outage logged once when it starts and once when it ends, with counts,
//! rather than a line per BSL per retry while the apiserver is down.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

const FIRST: Duration = Duration::from_millis(500);
const MOST: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub struct Retries {
    attempts: HashMap<String, u32>,
    outage: Option<Outage>,
}

#[derive(Debug)]
struct Outage {
    since: Instant,
    failures: u64,
}

/// An outage of status writes that has just ended.
#[derive(Debug, PartialEq, Eq)]
pub struct Ended {
    pub failures: u64,
    pub lasted: Duration,
    /// BSLs still waiting for their retry.
    pub waiting: usize,
}

impl Retries {
    /// A write for `id` failed: when to retry it, and whether this failure starts an outage.
    pub fn failed(&mut self, id: &str, now: Instant) -> (Duration, bool) {
        let attempt = self.attempts.entry(id.to_string()).or_insert(0);
        *attempt = attempt.saturating_add(1);
        let delay = backoff(*attempt, id);
        let started = self.outage.is_none();
        let outage = self.outage.get_or_insert(Outage {
            since: now,
            failures: 0,
        });
        outage.failures += 1;
        (delay, started)
    }

    /// A write for `id`, sent at `sent`, succeeded; Some when that ends an outage. A write sent
    /// before the outage began proves nothing about it: its answer may just have been late.
    pub fn succeeded(&mut self, id: &str, sent: Instant, now: Instant) -> Option<Ended> {
        self.attempts.remove(id);
        if self.outage.as_ref()?.since > sent {
            return None;
        }
        let outage = self.outage.take()?;
        Some(Ended {
            failures: outage.failures,
            lasted: now.saturating_duration_since(outage.since),
            waiting: self.attempts.len(),
        })
    }

    /// Forgets a BSL that is gone.
    pub fn forget(&mut self, id: &str) {
        self.attempts.remove(id);
    }
}

/// 0.5 s, 1 s, 2 s ... up to 30 s, each between half and all of that, spread per BSL so that
/// BSLs failing together do not retry together.
pub fn backoff(attempt: u32, id: &str) -> Duration {
    let exponent = attempt.saturating_sub(1).min(16);
    let full = FIRST.saturating_mul(1 << exponent).min(MOST);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (id, attempt).hash(&mut hasher);
    let share = 0.5 + (hasher.finish() % 1000) as f64 / 2000.0;
    full.mul_f64(share)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_from_half_a_second_to_thirty_with_jitter() {
        for attempt in 1..40 {
            let full = FIRST.saturating_mul(1 << (attempt - 1).min(16)).min(MOST);
            let d = backoff(attempt, "ns/b");
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
        }
        assert!(backoff(1, "ns/b") <= Duration::from_millis(500));
        assert!(backoff(30, "ns/b") >= Duration::from_secs(15));
        let spread: std::collections::HashSet<Duration> =
            (0..20).map(|i| backoff(3, &format!("ns/b{i}"))).collect();
        assert!(spread.len() > 10, "BSLs failing together retry apart");
    }

    #[test]
    fn an_outage_is_reported_once_when_it_starts_and_once_when_it_ends() {
        let mut retries = Retries::default();
        let t0 = Instant::now();
        assert!(retries.failed("ns/a", t0).1, "the first failure starts it");
        for i in 0..50 {
            let (delay, started) = retries.failed(&format!("ns/b{}", i % 5), t0);
            assert!(!started);
            assert!(delay <= MOST);
        }
        let (second, _) = retries.failed("ns/a", t0);
        assert!(
            second > backoff(1, "ns/a") / 2,
            "the same BSL backs off further"
        );
        let late = retries.succeeded("ns/c", t0 - Duration::from_millis(1), t0);
        assert_eq!(late, None, "a write sent before the outage does not end it");
        let ended = retries.succeeded("ns/a", t0, t0 + Duration::from_secs(23));
        assert_eq!(
            ended,
            Some(Ended {
                failures: 52,
                lasted: Duration::from_secs(23),
                waiting: 5
            })
        );
        assert_eq!(retries.succeeded("ns/b0", t0, t0), None, "reported once");
        assert!(
            retries.failed("ns/b1", t0).1,
            "the next failure starts a new outage"
        );
    }
}
