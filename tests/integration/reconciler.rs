//! The reconciler as shipped (the bsl-sentinel binary, `serve --webhook=false`), against the
//! real control plane and real storage servers on 127.0.0.1.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::support::control_plane::free_port;
use crate::support::sentinel::Sentinel;
use crate::support::storage::{Azurite, FakeGcs, Location, SeaweedFs};
use crate::support::{ControlPlane, Crd, Kubectl};

/// Within this long a fresh BSL has its first phase (checks run immediately).
const SOON: Duration = Duration::from_secs(20);

struct Ns {
    plane: &'static ControlPlane,
    name: String,
}

impl Ns {
    /// The Events recorded in the namespace, counted by reason.
    fn event_counts(&self) -> BTreeMap<String, usize> {
        let events = self
            .kubectl()
            .ok(&[
                "get",
                "events.events.k8s.io",
                "-n",
                &self.name,
                "-o",
                "json",
            ])
            .stdout;
        let events: Value = serde_json::from_str(&events).unwrap_or_default();
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["reason"].as_str())
            .fold(BTreeMap::new(), |mut counts, reason| {
                *counts.entry(reason.to_string()).or_default() += 1;
                counts
            })
    }

    fn new(crd: Crd, prefix: &str) -> Ns {
        let plane = ControlPlane::get(crd);
        Ns {
            plane,
            name: plane.namespace(prefix),
        }
    }

    fn kubectl(&self) -> Kubectl {
        self.plane.kubectl()
    }

    fn secret(&self, name: &str, key: &str, value: &[u8]) {
        let b64 = base64::engine::general_purpose::STANDARD.encode(value);
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {key: b64}});
        let out = self.kubectl().apply(&self.name, &secret.to_string());
        assert!(out.success, "{}", out.stderr);
    }

    /// Creates (or updates) a BSL from a storage location, with its credential Secret.
    fn bsl(&self, name: &str, location: &Location, extra: Value) {
        let secret = format!("{name}-credentials");
        self.secret(&secret, "cloud", &location.credential);
        let mut spec = serde_json::to_value(&location.spec).unwrap_or_default();
        spec["credential"] = json!({"name": secret, "key": "cloud"});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        self.apply_spec(name, spec);
    }

    fn apply_spec(&self, name: &str, spec: Value) {
        let bsl = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": name}, "spec": spec});
        let out = self.kubectl().apply(&self.name, &bsl.to_string());
        assert!(out.success, "{}", out.stderr);
    }

    fn get(&self, name: &str) -> Value {
        let out = self
            .kubectl()
            .run(&["get", "bsl", name, "-n", &self.name, "-o", "json"]);
        serde_json::from_str(&out.stdout).unwrap_or_default()
    }

    fn status(&self, name: &str) -> Value {
        self.get(name)["status"].clone()
    }

    /// Waits until the BSL's phase is `phase`; returns its status.
    async fn wait_phase(
        &self,
        sentinel: &Sentinel,
        name: &str,
        phase: &str,
        within: Duration,
    ) -> Value {
        let mut status = Value::Null;
        sentinel
            .wait_for(&format!("{name} to become {phase}"), within, || {
                status = self.status(name);
                status["phase"] == phase
            })
            .await;
        status
    }

    async fn start(&self, identity: &str) -> Sentinel {
        Sentinel::start(self.plane, &self.name, identity, &[]).await
    }
}

fn message(status: &Value) -> &str {
    status["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_bsl_becomes_available_on_both_crds() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("available").await;
    for crd in [Crd::Velero, Crd::Project] {
        let ns = Ns::new(crd, "available");
        ns.bsl(
            "primary",
            &s3.location("available", None),
            json!({"default": true}),
        );
        let sentinel = ns.start("a").await;
        let status = ns.wait_phase(&sentinel, "primary", "Available", SOON).await;
        assert_eq!(message(&status), "", "{crd:?}");
        assert!(status["lastValidationTime"].is_string(), "{status}");
        let metrics = sentinel.get("/metrics").1;
        let series = format!(
            r#"bsl_sentinel_bsl_phase{{namespace="{}",name="primary",phase="Available"}} 1"#,
            ns.name
        );
        assert!(metrics.contains(&series), "{metrics}");
        assert!(
            metrics.contains("bsl_sentinel_check_duration_seconds_count{provider=\"aws\"}"),
            "{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_unavailable_with_clear_messages_and_fixing_the_spec_heals() {
    let s3 = SeaweedFs::shared();
    s3.seed(
        "failures",
        &["foreign/x", "velero/backups/b1/velero-backup.json"],
    )
    .await;
    let ns = Ns::new(Crd::Project, "failures");

    let mut unreachable = s3.location("failures", None);
    let dead = format!("http://127.0.0.1:{}", free_port());
    if let Some(config) = unreachable.spec.config.as_mut() {
        config.insert("s3Url".into(), dead.clone());
    }
    ns.bsl("unreachable", &unreachable, json!({}));
    let mut wrong = s3.location("failures", Some("backups-only"));
    wrong.credential =
        crate::support::storage::credentials_ini(&s3.access_key, "not-the-secret").into_bytes();
    ns.bsl("wrong-credentials", &wrong, json!({}));
    ns.bsl("foreign", &s3.location("failures", None), json!({}));
    let mut plugin =
        json!({"provider": "example.com/objectstore", "objectStorage": {"bucket": "b"}});
    ns.apply_spec("plugin", plugin.take());

    let sentinel = ns.start("a").await;
    let status = ns
        .wait_phase(&sentinel, "unreachable", "Unavailable", SOON)
        .await;
    let text = message(&status);
    assert!(
        text.starts_with("BackupStorageLocation \"unreachable\" is unavailable: cannot connect to"),
        "{text}"
    );
    assert!(text.contains(&dead), "{text}");

    let status = ns
        .wait_phase(&sentinel, "wrong-credentials", "Unavailable", SOON)
        .await;
    let text = message(&status);
    assert!(text.contains("authentication failed"), "{text}");
    assert!(
        !text.contains("not-the-secret") && !text.contains(&s3.secret_key),
        "a secret leaked: {text}"
    );

    let status = ns
        .wait_phase(&sentinel, "foreign", "Unavailable", SOON)
        .await;
    assert!(
        message(&status)
            .ends_with("Backup store contains invalid top-level directories: [foreign velero]"),
        "{status}"
    );

    sentinel
        .wait_for("the plugin BSL's message", SOON, || {
            message(&ns.status("plugin")).contains("cannot check provider")
        })
        .await;
    assert_eq!(
        ns.status("plugin")["phase"],
        Value::Null,
        "a plugin provider's phase is left alone"
    );

    // Fixing the spec (a prefix that holds only Velero's directories) brings Available.
    let mut fixed = serde_json::to_value(&s3.location("failures", None).spec).unwrap_or_default();
    fixed["credential"] = json!({"name": "foreign-credentials", "key": "cloud"});
    fixed["objectStorage"]["prefix"] = json!("velero");
    ns.apply_spec("foreign", fixed);
    let status = ns.wait_phase(&sentinel, "foreign", "Available", SOON).await;
    assert_eq!(message(&status), "");
    // A Warning for each BSL that failed its first check, and one recovery.
    sentinel
        .wait_for("three Unavailable events and one Available", SOON, || {
            let events = ns.event_counts();
            events.get("Unavailable") == Some(&3) && events.get("Available") == Some(&1)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_outage_is_seen_at_the_next_check_and_recovery_too() {
    let s3 = SeaweedFs::dedicated();
    s3.create_bucket("outage").await;
    let ns = Ns::new(Crd::Velero, "outage");
    ns.bsl(
        "primary",
        &s3.location("outage", None),
        json!({"validationFrequency": "2s"}),
    );
    let sentinel = ns.start("a").await;
    ns.wait_phase(&sentinel, "primary", "Available", SOON).await;

    s3.stop();
    let status = ns
        .wait_phase(&sentinel, "primary", "Unavailable", Duration::from_secs(15))
        .await;
    assert!(message(&status).contains("cannot connect to"), "{status}");
    // Events announce the failure and the recovery, not the first Available: that one would
    // have been recorded before the outage began.
    let mut events = BTreeMap::new();
    sentinel
        .wait_for("the outage's event", SOON, || {
            events = ns.event_counts();
            events.get("Unavailable") == Some(&1)
        })
        .await;
    assert_eq!(events.get("Available"), None, "{events:?}");
    // The dedicated server restarts with empty data (a fresh data folder starts in seconds,
    // a reused one takes 15 s to warm up): the bucket is made again.
    s3.start();
    s3.create_bucket("outage").await;
    ns.wait_phase(&sentinel, "primary", "Available", Duration::from_secs(40))
        .await;
    sentinel
        .wait_for("the recovery's event", SOON, || {
            events = ns.event_counts();
            events.get("Available") == Some(&1)
        })
        .await;
    assert_eq!(events.get("Unavailable"), Some(&1), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bsl_created_after_start_up_is_checked() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("late").await;
    let ns = Ns::new(Crd::Project, "late");
    let sentinel = ns.start("a").await;
    sentinel
        .wait_for("the no-BSL error", SOON, || {
            sentinel
                .log_text()
                .contains("no BackupStorageLocation exists")
        })
        .await;
    ns.bsl("late", &s3.location("late", None), json!({"default": true}));
    ns.wait_phase(&sentinel, "late", "Available", SOON).await;
}

/// How many reconciles ended with `result`, from /metrics.
fn reconciles(sentinel: &Sentinel, result: &str) -> u64 {
    let metrics = sentinel.get("/metrics").1;
    let prefix = format!("bsl_sentinel_reconciles_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// How many storage checks ran, from /metrics.
fn checks(sentinel: &Sentinel) -> u64 {
    reconciles(sentinel, "checked")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frequency_zero_checks_once_and_status_writes_never_trigger_checks() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("frequency").await;
    let ns = Ns::new(Crd::Velero, "frequency");
    ns.bsl(
        "once",
        &s3.location("frequency", None),
        json!({"validationFrequency": "0s"}),
    );
    let sentinel = ns.start("a").await;
    let first = ns.wait_phase(&sentinel, "once", "Available", SOON).await;
    let generation = ns.get("once")["metadata"]["generation"]
        .as_i64()
        .unwrap_or_default();
    let before = checks(&sentinel);

    // Velero writes status on the main resource too: each write bumps generation on its CRD.
    for i in 0..3 {
        let patch = json!({"status": {"lastSyncedTime": format!("2026-12-02T10:00:0{i}Z")}});
        ns.kubectl().ok(&[
            "patch",
            "bsl",
            "once",
            "-n",
            &ns.name,
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ]);
    }
    let after = ns.get("once");
    assert!(
        after["metadata"]["generation"].as_i64().unwrap_or_default() > generation,
        "{after}"
    );
    // Three server default periods (2s) pass without a check.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        ns.status("once")["lastValidationTime"],
        first["lastValidationTime"]
    );
    assert_eq!(
        checks(&sentinel),
        before,
        "a status write or the period triggered a check"
    );

    // A spec change is checked at once.
    let mut spec = ns.get("once")["spec"].clone();
    spec["accessMode"] = json!("ReadOnly");
    ns.apply_spec("once", spec);
    sentinel
        .wait_for("a check of the changed spec", SOON, || {
            checks(&sentinel) > before
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_logs_tell_the_truth_and_the_process_keeps_running() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("health").await;
    let ns = Ns::new(Crd::Project, "health");
    let sentinel = ns.start("a").await;
    let log_has = |needle: &str| sentinel.log_text().contains(needle);
    sentinel
        .wait_for("the no-BSL error", SOON, || {
            log_has("ERROR") && log_has("no BackupStorageLocation exists: at least one is required")
        })
        .await;

    let mut dead = s3.location("health", None);
    if let Some(config) = dead.spec.config.as_mut() {
        config.insert("s3Url".into(), format!("http://127.0.0.1:{}", free_port()));
    }
    ns.bsl("down", &dead, json!({"default": true}));
    sentinel
        .wait_for("the all-unavailable error", SOON, || {
            log_has("all 1 BackupStorageLocations are unavailable")
        })
        .await;
    ns.bsl("up", &s3.location("health", None), json!({}));
    sentinel.wait_for("the mixed warning", SOON, || {
        log_has("WARN") && log_has("some BackupStorageLocations are unavailable (1 available, 1 unavailable, 0 not yet checked)")
    }).await;
    ns.kubectl().ok(&["delete", "bsl", "down", "-n", &ns.name]);
    sentinel
        .wait_for("the no-default warning", SOON, || {
            log_has("no BackupStorageLocation is the default (1 available")
        })
        .await;
    assert_eq!(
        sentinel.get("/livez").0,
        200,
        "liveness must not depend on BSL state"
    );
    // The same process all along: no restart, no exit, whatever the BSLs did.
    let pid = sentinel.pid();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert!(!sentinel.log_text().contains("bsl-sentinel stopped"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp_and_azure_providers_work() {
    let gcs = FakeGcs::shared();
    gcs.seed("gcs-bucket", &["backups/b1/velero-backup.json"])
        .await;
    let azure = Azurite::shared();
    azure
        .seed("azure-container", &["backups/b1/velero-backup.json"])
        .await;
    let ns = Ns::new(Crd::Project, "providers");
    ns.bsl("gcp", &gcs.location("gcs-bucket", None), json!({}));
    ns.bsl("azure", &azure.location("azure-container", None), json!({}));
    let sentinel = ns.start("a").await;
    ns.wait_phase(&sentinel, "gcp", "Available", SOON).await;
    ns.wait_phase(&sentinel, "azure", "Available", SOON).await;
}

fn lease_holder(ns: &Ns) -> String {
    let out = ns.kubectl().run(&[
        "get",
        "lease",
        "bsl-sentinel",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    out.stdout.trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_writes_status_and_another_takes_over_when_it_dies() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("election").await;
    let ns = Ns::new(Crd::Velero, "election");
    ns.bsl(
        "first",
        &s3.location("election", None),
        json!({"default": true}),
    );
    let mut replicas = vec![ns.start("replica-a").await, ns.start("replica-b").await];
    replicas[0]
        .wait_for("a leader", SOON, || !lease_holder(&ns).is_empty())
        .await;
    ns.wait_phase(&replicas[0], "first", "Available", SOON)
        .await;

    // Only the holder runs the reconciler: only its log says so, only it counts checks.
    let holder = lease_holder(&ns);
    let leader = replicas
        .iter()
        .position(|r| r.identity == holder)
        .unwrap_or_else(|| panic!("holder {holder:?} is no replica"));
    let elected = |s: &Sentinel| s.log_text().contains("elected: running the reconciler");
    let (lead, other) = (&replicas[leader], &replicas[1 - leader]);
    assert!(elected(lead), "{}", lead.log_text());
    assert!(!elected(other), "two status writers: {}", other.log_text());
    assert!(checks(lead) > 0);
    assert_eq!(checks(other), 0);

    // SIGKILL the holder: the other takes over within the lease duration (4s) plus a retry.
    let mut dead = replicas.remove(leader);
    dead.kill();
    let survivor = &replicas[0];
    let killed = std::time::Instant::now();
    survivor
        .wait_for("the take-over", Duration::from_secs(10), || {
            lease_holder(&ns) == survivor.identity
        })
        .await;
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "took {:?}",
        killed.elapsed()
    );

    // Nothing is left unchecked: a BSL created now gets its phase from the new leader.
    ns.bsl("second", &s3.location("election", None), json!({}));
    ns.wait_phase(survivor, "second", "Available", SOON).await;
}

/// `bsl-sentinel ARGS` against the control plane: (exit code, stdout).
fn cli(ns: &Ns, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(crate::support::sentinel::binary())
        .env("KUBECONFIG", &ns.plane.kubeconfig)
        .env_remove("POD_NAMESPACE")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("bsl-sentinel: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_get_follow_phase_changes_with_exit_codes() {
    let s3 = SeaweedFs::shared();
    // Not "status": SeaweedFS's S3 gateway serves its own /status there.
    s3.create_bucket("state").await;
    let ns = Ns::new(Crd::Project, "status");
    ns.bsl(
        "primary",
        &s3.location("state", Some("cluster-a")),
        json!({"default": true}),
    );
    let sentinel = ns.start("a").await;
    ns.wait_phase(&sentinel, "primary", "Available", SOON).await;

    let status = async |want: i32| {
        let mut last = (None, String::new());
        sentinel
            .wait_for(
                &format!("status exit code {want}"),
                Duration::from_secs(15),
                || {
                    last = cli(&ns, &["status", "-n", &ns.name]);
                    last.0 == Some(want)
                },
            )
            .await;
        last.1
    };
    let text = status(0).await;
    assert!(text.starts_with("STATE: Ready\n"), "{text}");
    assert!(
        text.contains(&format!("leader {}", sentinel.identity)),
        "{text}"
    );

    let (code, table) = cli(&ns, &["get", "-n", &ns.name]);
    assert_eq!(code, Some(0));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "NAME",
            "PROVIDER",
            "BUCKET/PREFIX",
            "PHASE",
            "LAST",
            "VALIDATED",
            "ACCESS",
            "MODE",
            "DEFAULT"
        ]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        (row[0], row[1], row[2], row[3]),
        ("primary", "aws", "state/cluster-a", "Available"),
        "{table}"
    );
    assert_eq!((row[5], row[6]), ("ReadWrite", "true"), "{table}");
    let (_, json) = cli(&ns, &["get", "-n", &ns.name, "-o", "json"]);
    let listed: Value = serde_json::from_str(&json).unwrap_or_default();
    assert_eq!(listed[0]["status"]["phase"], "Available", "{json}");

    // A second, unreachable BSL: Degraded, exit 1, within one check.
    let mut dead = s3.location("state", None);
    if let Some(config) = dead.spec.config.as_mut() {
        config.insert("s3Url".into(), format!("http://127.0.0.1:{}", free_port()));
    }
    ns.bsl("broken", &dead, json!({}));
    let text = status(1).await;
    assert!(text.starts_with("STATE: Degraded\n"), "{text}");
    let (_, table) = cli(&ns, &["get", "broken", "-n", &ns.name]);
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|r| r.contains("Unavailable")),
        "{table}"
    );

    // Only the broken one left: NotReady, exit 2; the admin port says the same as JSON.
    ns.kubectl()
        .ok(&["delete", "bsl", "primary", "-n", &ns.name]);
    let text = status(2).await;
    assert!(text.starts_with("STATE: NotReady\n"), "{text}");
    let (code, body) = sentinel.get("/status");
    let served: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(
        (code, &served["state"]),
        (200, &json!("NotReady")),
        "{body}"
    );
    let (_, json) = cli(&ns, &["status", "-n", &ns.name, "-o", "json"]);
    let published: Value = serde_json::from_str(&json).unwrap_or_default();
    assert_eq!(published["locations"][0]["name"], "broken", "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_goes_through_the_subresource_where_the_crd_has_one() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("subresource").await;
    let ns = Ns::new(Crd::WithStatusSubresource, "subresource");
    ns.bsl("primary", &s3.location("subresource", None), json!({}));
    let sentinel = ns.start("a").await;
    // Written to the main resource, the apiserver would drop it: the phase proves /status.
    sentinel
        .wait_for("the detected subresource", SOON, || {
            sentinel.log_text().contains("status_subresource=true")
        })
        .await;
    ns.wait_phase(&sentinel, "primary", "Available", SOON).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_edited_during_a_check_never_gets_the_old_result() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("edited").await;
    // Accepts connections (the kernel completes the handshake) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let silent_url = format!(
        "http://{}",
        silent.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let ns = Ns::new(Crd::Project, "edited");
    // Checks of the silent endpoint last 10 s and repeat every 2 s: one is in flight when the
    // spec changes.
    let sentinel = Sentinel::start(ns.plane, &ns.name, "a", &["--check-timeout", "10s"]).await;
    sentinel
        .wait_for("the reconciler", SOON, || {
            sentinel
                .log_text()
                .contains("no BackupStorageLocation exists")
        })
        .await;
    let mut slow = s3.location("edited", None);
    if let Some(config) = slow.spec.config.as_mut() {
        config.insert("s3Url".into(), silent_url);
    }
    ns.bsl("edited", &slow, json!({}));
    tokio::time::sleep(Duration::from_secs(2)).await;
    ns.bsl("edited", &s3.location("edited", None), json!({}));
    // From here on the spec is the new one: a result of the old one must never be written.
    let at_edit = ns.status("edited")["lastValidationTime"].clone();
    let mut stale = Vec::new();
    sentinel
        .wait_for("the edited spec's result", Duration::from_secs(40), || {
            let status = ns.status("edited");
            if message(&status).contains("timed out") && status["lastValidationTime"] != at_edit {
                stale.push(status.clone());
            }
            status["phase"] == "Available"
        })
        .await;
    assert!(
        stale.is_empty(),
        "the old spec's result was written over the new spec: {stale:?}"
    );
    let refused = reconciles(&sentinel, "spec_changed");
    assert!(
        refused >= 1,
        "the in-flight check's write was not refused: {}",
        sentinel.log_text()
    );
    drop(silent);
}
