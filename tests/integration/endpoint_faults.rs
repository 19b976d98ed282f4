//! Storage endpoints that do not answer, answer late or stall in the TLS handshake, beside
//! healthy ones, with the reconciler as shipped against the real apiserver and SeaweedFS: the
//! healthy BSLs are checked as if the faulty endpoints did not exist, the faulty ones get their
//! verdicts within the check timeout and keep getting fresh ones, and recover when the
//! endpoint answers again.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use base64::Engine;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};

use crate::support::faults::{Faulty, Link, Mode};
use crate::support::sentinel::Sentinel;
use crate::support::storage::{SeaweedFs, credentials_ini};
use crate::support::{ControlPlane, Crd, eventually};

/// Phase, lastValidationTime and message of one BSL.
#[derive(Clone, Debug, Default)]
struct Status {
    phase: String,
    last: String,
    message: String,
}

struct Fixture {
    plane: &'static ControlPlane,
    ns: String,
}

impl Fixture {
    async fn new(prefix: &str) -> Fixture {
        let plane = ControlPlane::get(Crd::Velero);
        let ns = plane.namespace(prefix);
        let s3 = SeaweedFs::shared();
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        for (name, text) in [
            ("good", s3.credentials()),
            (
                "wrong",
                credentials_ini(&s3.access_key, "wrong-secret-0123456789"),
            ),
        ] {
            let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {"cloud": b64(&text)}});
            let out = plane.kubectl().apply(&ns, &secret.to_string());
            assert!(out.success, "{}", out.stderr);
        }
        Fixture { plane, ns }
    }

    /// Creates `count` aws BSLs named `{prefix}-{i}` on bucket "faults" at `url`.
    fn bsls(&self, prefix: &str, count: usize, url: &str, secret: &str) {
        let items: Vec<Value> = (0..count)
            .map(|i| {
                json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
                       "metadata": {"name": format!("{prefix}-{i:03}")},
                       "spec": {"provider": "aws", "objectStorage": {"bucket": "faults"},
                                "credential": {"name": secret, "key": "cloud"},
                                "config": {"region": "us-east-1", "s3Url": url, "s3ForcePathStyle": "true"}}})
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        let out = self
            .plane
            .kubectl()
            .run_with_stdin(&["create", "-n", &self.ns, "-f", "-"], &list.to_string());
        assert!(out.success, "{}", out.stderr);
    }

    async fn statuses(&self) -> HashMap<String, Status> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.plane.client().await,
            &self.ns,
            &bsl_sentinel::bsl::bsl_resource(),
        );
        let list = api
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("listing BSLs: {e}"));
        list.items
            .into_iter()
            .map(|o| {
                let status = &o.data["status"];
                let text = |k: &str| status[k].as_str().unwrap_or_default().to_string();
                let name = o.metadata.name.unwrap_or_default();
                (
                    name,
                    Status {
                        phase: text("phase"),
                        last: text("lastValidationTime"),
                        message: text("message"),
                    },
                )
            })
            .collect()
    }

    /// Polls until every BSL named `{prefix}-*` satisfies `done`; panics with the log after
    /// `within`.
    async fn wait_all(
        &self,
        sentinel: &Sentinel,
        prefix: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&Status) -> bool,
    ) -> HashMap<String, Status> {
        eventually(&format!("{prefix}: all {what}"), within, || async {
            let all: HashMap<String, Status> = self
                .statuses()
                .await
                .into_iter()
                .filter(|(name, _)| name.starts_with(&format!("{prefix}-")))
                .collect();
            if !all.is_empty() && all.values().all(&done) {
                return Ok(all);
            }
            let left: Vec<_> = all.iter().filter(|(_, s)| !done(s)).take(3).collect();
            Err(format!("e.g. {left:?}; log:\n{}", sentinel.log_text()))
        })
        .await
    }
}

fn available(s: &Status) -> bool {
    s.phase == "Available"
}

fn unavailable(s: &Status) -> bool {
    s.phase == "Unavailable"
}

/// 20 healthy BSLs beside 101 on a silent endpoint (one with wrong credentials), 20 on an https
/// endpoint that stalls in the TLS handshake and 10 on a second silent endpoint. More BSLs
/// wait for the faulty endpoints than any global limit on checks in flight would hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_endpoints_never_delay_healthy_ones_and_recover() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("faults").await;
    let upstream = s3.endpoint.trim_start_matches("http://").to_string();
    let silent = Faulty::start(&upstream, Mode::Silent);
    let stall = Faulty::silent();
    let other = Faulty::silent();
    let fx = Fixture::new("silent").await;
    fx.bsls("healthy", 20, &s3.endpoint, "good");
    fx.bsls("silent", 100, &silent.url(), "good");
    fx.bsls("wrongkey", 1, &silent.url(), "wrong");
    fx.bsls("tls", 20, &stall.https_url(), "good");
    fx.bsls("other", 10, &other.url(), "good");

    let timeout = Duration::from_secs(2);
    let period = Duration::from_secs(5);
    let sentinel = Sentinel::start(
        fx.plane,
        &fx.ns,
        "faults",
        &[
            "--check-timeout",
            "2s",
            "--validation-frequency",
            "5s",
            "--max-connections-per-endpoint",
            "2",
        ],
    )
    .await;
    // Old behaviour for comparison: with 64 checks in flight at most, 131 BSLs waiting for
    // 2 connections each at silent endpoints kept the healthy ones waiting for over a minute.
    let started = Instant::now();
    fx.wait_all(
        &sentinel,
        "healthy",
        Duration::from_secs(10),
        "Available",
        available,
    )
    .await;
    eprintln!("20 healthy BSLs Available after {:?}", started.elapsed());
    // One timeout per endpoint, then every other BSL there gets the endpoint's verdict.
    let verdict_by = timeout + Duration::from_secs(8);
    let silent_now = fx
        .wait_all(&sentinel, "silent", verdict_by, "Unavailable", unavailable)
        .await;
    let tls_now = fx
        .wait_all(&sentinel, "tls", verdict_by, "Unavailable", unavailable)
        .await;
    fx.wait_all(&sentinel, "other", verdict_by, "Unavailable", unavailable)
        .await;
    eprintln!(
        "131 BSLs on silent endpoints Unavailable after {:?} (check timeout {timeout:?})",
        started.elapsed()
    );

    let here = format!("127.0.0.1:{}", silent.port);
    let mut told = 0;
    for (name, status) in &silent_now {
        assert!(
            status.message.contains(&here)
                && status
                    .message
                    .contains("timed out after 2s waiting for the first byte of the response"),
            "{name}: {}",
            status.message
        );
        if status.message.contains("not checked: ") {
            told += 1;
            assert!(
                status.message.contains("BSLs use this endpoint")
                    && status.message.contains("probed with one check every 5s"),
                "{name}: {}",
                status.message
            );
        }
    }
    // At most one timed-out check per connection; the rest were told at once.
    assert!(
        told >= 100 - 2,
        "only {told} told by the endpoint's verdict"
    );
    for (name, status) in &tls_now {
        assert!(
            status.message.contains(&format!(
                "in the TLS handshake with 127.0.0.1:{}",
                stall.port
            )),
            "{name}: {}",
            status.message
        );
    }

    for endpoint in [&silent, &stall, &other] {
        assert!(
            endpoint.peak_connections() <= 2,
            "{} connections at once to one endpoint (limit 2)",
            endpoint.peak_connections()
        );
    }

    // Over several periods every BSL keeps getting fresh verdicts, healthy ones staying
    // Available and faulty ones Unavailable.
    let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
    let watch = Instant::now();
    while watch.elapsed() < period * 4 {
        for (name, status) in fx.statuses().await {
            let healthy = name.starts_with("healthy-");
            assert!(
                if healthy {
                    available(&status)
                } else {
                    unavailable(&status)
                },
                "{name} flipped: {status:?}"
            );
            seen.entry(name).or_default().insert(status.last);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (name, times) in &seen {
        assert!(
            times.len() >= 3,
            "{name} validated only at {times:?} over 4 periods"
        );
    }

    // The endpoint answers again: its next probe finds out, and every BSL on it is checked
    // for real, each with its own verdict.
    silent.set(Mode::Forward);
    let recovery = period + timeout + Duration::from_secs(10);
    fx.wait_all(&sentinel, "silent", recovery, "Available", available)
        .await;
    let wrong = fx
        .wait_all(&sentinel, "wrongkey", recovery, "Unavailable again", |s| {
            unavailable(s) && s.message.contains("authentication failed")
        })
        .await;
    assert_eq!(wrong.len(), 1);
    assert!(
        sentinel
            .log_text()
            .contains("the storage endpoint answers again"),
        "recovery is logged"
    );
    assert!(
        silent.peak_connections() <= 2,
        "{}",
        silent.peak_connections()
    );
}

/// An endpoint that answers after 2 s, with more BSLs on it than its connections serve at once:
/// its BSLs wait for their turns, none times out for having waited, and the healthy BSLs are
/// checked meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_endpoint_delays_only_its_own_bsls() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("faults").await;
    let upstream = s3.endpoint.trim_start_matches("http://").to_string();
    let slow = Faulty::start(&upstream, Mode::Slow(Duration::from_secs(2)));
    let fx = Fixture::new("slow").await;
    fx.bsls("healthy", 10, &s3.endpoint, "good");
    fx.bsls("slow", 16, &slow.url(), "good");
    let sentinel = Sentinel::start(
        fx.plane,
        &fx.ns,
        "slow",
        &[
            "--check-timeout",
            "4s",
            "--validation-frequency",
            "1h",
            "--max-connections-per-endpoint",
            "2",
        ],
    )
    .await;
    fx.wait_all(
        &sentinel,
        "healthy",
        Duration::from_secs(10),
        "Available",
        available,
    )
    .await;
    let during = fx.statuses().await;
    let waiting = during
        .iter()
        .filter(|(n, s)| n.starts_with("slow-") && s.phase.is_empty())
        .count();
    assert!(
        waiting > 0,
        "the slow endpoint's BSLs were all done already"
    );
    // 16 checks, 2 at a time, 2 s each: about 16 s.
    eventually(
        "slow BSLs all Available",
        Duration::from_secs(60),
        || async {
            let statuses = fx.statuses().await;
            let slow_ones: Vec<&Status> = statuses
                .iter()
                .filter(|(n, _)| n.starts_with("slow-"))
                .map(|(_, s)| s)
                .collect();
            assert!(
                !slow_ones.iter().any(|s| unavailable(s)),
                "a slow BSL timed out: {slow_ones:?}"
            );
            if slow_ones.iter().all(|s| available(s)) {
                return Ok(());
            }
            Err(format!("{slow_ones:?}; log:\n{}", sentinel.log_text()))
        },
    )
    .await;
}

/// A storage endpoint that goes away and comes back again and again (its connections closed,
/// new ones refused): every flap is seen at the next check both ways, and the socket bound
/// holds throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_flaps_are_followed_and_the_socket_bound_holds() {
    const FLAPS: usize = 8;
    let s3 = SeaweedFs::shared();
    s3.create_bucket("faults").await;
    let link = Link::start(s3.endpoint.trim_start_matches("http://"));
    let fx = Fixture::new("flaps").await;
    fx.bsls(
        "flap",
        30,
        &format!("http://127.0.0.1:{}", link.port),
        "good",
    );
    let sentinel = Sentinel::start(
        fx.plane,
        &fx.ns,
        "flaps",
        &[
            "--check-timeout",
            "2s",
            "--validation-frequency",
            "1s",
            "--max-connections-per-endpoint",
            "2",
        ],
    )
    .await;
    let within = Duration::from_secs(15);
    fx.wait_all(&sentinel, "flap", within, "Available", available)
        .await;
    let start = Instant::now();
    for _ in 0..FLAPS {
        link.refuse();
        fx.wait_all(&sentinel, "flap", within, "Unavailable", unavailable)
            .await;
        link.accept();
        fx.wait_all(&sentinel, "flap", within, "Available", available)
            .await;
    }
    eprintln!(
        "{FLAPS} storage flaps under 30 BSLs followed both ways in {:?}, peak {} connections (limit 2)",
        start.elapsed(),
        link.peak_connections()
    );
    assert!(
        link.peak_connections() <= 2,
        "{} connections at once (limit 2)",
        link.peak_connections()
    );
}
