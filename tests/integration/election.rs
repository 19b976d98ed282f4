//! Leader hand-over under the faults an operator meets: a graceful stop (SIGTERM, as in a
//! rollout) and a leader cut off from the apiserver. Two replicas of the shipped binary share
//! a Lease; the log lines with their timestamps say who wrote status when.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::json;

use crate::support::faults::Link;
use crate::support::sentinel::Sentinel;
use crate::support::storage::SeaweedFs;
use crate::support::{ControlPlane, Crd};

const LEASE: &str = "6s";

struct Pair {
    plane: &'static ControlPlane,
    ns: String,
}

impl Pair {
    async fn new(prefix: &str) -> Pair {
        let plane = ControlPlane::get(Crd::Velero);
        let ns = plane.namespace(prefix);
        let s3 = SeaweedFs::shared();
        s3.create_bucket("election").await;
        let mut spec =
            s3.location("election", None)
                .spec_with_secret(&plane.kubectl(), &ns, "cloud");
        spec["default"] = json!(true);
        let bsl = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "primary"}, "spec": spec});
        assert!(plane.kubectl().apply(&ns, &bsl.to_string()).success);
        Pair { plane, ns }
    }

    fn holder(&self) -> String {
        let out = self.plane.kubectl().run(&[
            "get",
            "lease",
            "bsl-sentinel",
            "-n",
            &self.ns,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        out.stdout.trim().to_string()
    }

    fn flags() -> Vec<&'static str> {
        vec![
            "--lease-duration",
            LEASE,
            "--validation-frequency",
            "1s",
            "--shutdown-grace",
            "1s",
        ]
    }

    /// Starts `first`, waits until it leads and has written status, then starts `second`.
    async fn start_two(&self, kubeconfig: &std::path::Path) -> (Sentinel, Sentinel) {
        let first = Sentinel::start_with(
            self.plane,
            kubeconfig,
            &self.ns,
            "first",
            &Pair::flags(),
            &[],
        )
        .await;
        first
            .wait_for("the first replica to lead", Duration::from_secs(20), || {
                self.holder() == "first" && first.log_text().contains("wrote status")
            })
            .await;
        let second = Sentinel::start(self.plane, &self.ns, "second", &Pair::flags()).await;
        (first, second)
    }
}

/// When a log line containing `text` was written (the first after `after`).
fn logged_at(log: &str, text: &str, after: Option<Timestamp>) -> Option<Timestamp> {
    log.lines()
        .filter(|line| line.contains(text))
        .filter_map(|line| line.split_whitespace().next()?.parse::<Timestamp>().ok())
        .find(|at| after.is_none_or(|after| *at > after))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_the_lease_and_the_other_takes_over_at_once() {
    let pair = Pair::new("sigterm").await;
    let (mut first, second) = pair.start_two(&pair.plane.kubeconfig).await;
    // Let the second replica see the Lease held and renewed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pair.holder(), "first");

    let stopped = Instant::now();
    first.send_sigterm();
    // Not ready at once, so the Service stops sending reviews, while still alive.
    first
        .wait_for("readiness off", Duration::from_millis(900), || {
            first.get("/readyz").0 == 503
        })
        .await;
    assert_eq!(first.get("/livez").0, 200, "alive through the grace");
    let code = first.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(
        code,
        Some(0),
        "a graceful stop exits 0: {}",
        first.log_text()
    );
    let log = first.log_text();
    assert!(log.contains("released the Lease"), "{log}");
    second
        .wait_for("the hand-over", Duration::from_secs(10), || {
            pair.holder() == "second"
        })
        .await;
    // Without the release the second replica waits out the whole lease (6 s) after the last
    // renewal it saw; with it, one retry (1.2 s) after the release.
    let took = stopped.elapsed();
    eprintln!("SIGTERM to the new holder of the Lease: {took:?} (lease {LEASE})");
    assert!(took < Duration::from_secs(4), "hand-over took {took:?}");
    second
        .wait_for(
            "the new leader's first write",
            Duration::from_secs(10),
            || second.log_text().contains("wrote status"),
        )
        .await;
    // The stopped replica wrote nothing after it released the Lease.
    let released = logged_at(&log, "released the Lease", None);
    assert!(released.is_some());
    assert_eq!(logged_at(&log, "wrote status", released), None, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_steps_down_before_another_takes_over() {
    let pair = Pair::new("partition").await;
    // The first replica reaches the apiserver through a link the test can cut.
    let server = pair.plane.server.trim_start_matches("https://").to_string();
    let link = Link::start(&server);
    let cut_off = pair.plane.kubeconfig_for(
        &format!("kubeconfig-{}", pair.ns),
        &format!("https://127.0.0.1:{}", link.port),
        "",
    );
    let (first, second) = pair.start_two(&cut_off).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let cut_at = Timestamp::now();
    link.cut();
    second
        .wait_for("the take-over", Duration::from_secs(20), || {
            pair.holder() == "second"
        })
        .await;
    second
        .wait_for(
            "the new leader's first write",
            Duration::from_secs(10),
            || second.log_text().contains("wrote status"),
        )
        .await;
    // Still cut off for a while: the old leader must not think it leads.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let first_log = first.log_text();
    let second_log = second.log_text();
    let stepped_down = logged_at(&first_log, "stopping the reconciler", Some(cut_at))
        .unwrap_or_else(|| panic!("the cut-off leader never stepped down:\n{first_log}"));
    let elected = logged_at(&second_log, "elected: running the reconciler", None)
        .unwrap_or_else(|| panic!("no election:\n{second_log}"));
    assert!(
        stepped_down < elected,
        "two leaders: the old stepped down at {stepped_down}, the new was elected at {elected}"
    );
    // Within the renew deadline (2/3 of 6 s) of its last renewal, so within about that of
    // the cut.
    let after_cut = stepped_down.duration_since(cut_at);
    eprintln!(
        "partition: the old leader stepped down {after_cut:#}, the new one was elected {:#} \
         after the cut (lease {LEASE})",
        elected.duration_since(cut_at)
    );
    assert!(
        after_cut < jiff::SignedDuration::from_secs(5),
        "stepped down {after_cut:?} after the cut"
    );
    assert_eq!(
        logged_at(&first_log, "wrote status", Some(stepped_down)),
        None,
        "the old leader wrote status after stepping down:\n{first_log}"
    );

    // Healed: the old leader follows the new one.
    link.heal();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(pair.holder(), "second");
    let first_log = first.log_text();
    assert_eq!(
        logged_at(
            &first_log,
            "elected: running the reconciler",
            Some(stepped_down)
        ),
        None,
        "{first_log}"
    );
}
