//! Velero itself in the loop: the real Velero server, CLI and aws plugin (v1.18.3, v1.14.3)
//! beside bsl-sentinel, on Velero's stock CRD, with SeaweedFS as the object store.

use std::time::Duration;

use futures::TryStreamExt;
use serde_json::{Value, json};

use crate::support::control_plane::free_port;
use crate::support::sentinel::{Sentinel, binary};
use crate::support::storage::{Location, SeaweedFs, put_all};
use crate::support::velero::{self, VeleroServer};
use crate::support::webhook::{SecretMount, register};
use crate::support::{ControlPlane, Crd, Kubectl, eventually};

fn apply_bsl(kubectl: &Kubectl, ns: &str, name: &str, location: &Location) {
    apply_bsl_with(kubectl, ns, name, location, json!({}));
}

/// The same with spec fields added (such as validationFrequency).
fn apply_bsl_with(kubectl: &Kubectl, ns: &str, name: &str, location: &Location, extra: Value) {
    let mut spec = location.spec_with_secret(kubectl, ns, &format!("{name}-credentials"));
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let bsl = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
                     "metadata": {"name": name}, "spec": spec});
    let out = kubectl.apply(ns, &bsl.to_string());
    assert!(out.success, "creating BSL {name}: {}", out.stderr);
}

fn bsl_status(kubectl: &Kubectl, ns: &str, name: &str) -> Value {
    let out = kubectl.ok(&["get", "bsl", name, "-n", ns, "-o", "json"]);
    let bsl: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("kubectl get bsl {name}: {e}"));
    bsl["status"].clone()
}

async fn wait_phase(kubectl: &Kubectl, ns: &str, name: &str, phase: &str) {
    eventually(
        &format!("BSL {name} to be {phase}"),
        Duration::from_secs(60),
        || async {
            let status = bsl_status(kubectl, ns, name);
            if status["phase"] == phase {
                Ok(())
            } else {
                Err(status.to_string())
            }
        },
    )
    .await
}

/// The objects of `velero ... -o json`: one object, or a list of them.
fn objects(text: &str) -> Vec<Value> {
    let value: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    match value["items"].as_array() {
        Some(items) => items.clone(),
        None => vec![value],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn velero_cli_shows_the_phase_and_validation_time_bsl_sentinel_wrote() {
    let plane = ControlPlane::get(Crd::Velero);
    velero::install_crds(plane, Crd::Velero);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("velero-cli");
    let s3 = SeaweedFs::shared();
    let bucket = format!("{ns}-backups");
    s3.create_bucket(&bucket).await;
    apply_bsl(&kubectl, &ns, "good", &s3.location(&bucket, None));
    let closed = format!("http://127.0.0.1:{}", free_port());
    apply_bsl(
        &kubectl,
        &ns,
        "bad",
        &s3.location_via(&closed, &bucket, None),
    );
    let _sentinel =
        Sentinel::start(plane, &ns, "velero-cli", &["--validation-frequency", "1h"]).await;
    wait_phase(&kubectl, &ns, "good", "Available").await;
    wait_phase(&kubectl, &ns, "bad", "Unavailable").await;

    let out = velero::cli(plane, &ns, &["backup-location", "get", "-o", "json"]);
    assert!(
        out.success,
        "velero backup-location get -o json: {}",
        out.stderr
    );
    let listed = objects(&out.stdout);
    assert_eq!(listed.len(), 2, "{}", out.stdout);
    for bsl in &listed {
        let name = bsl["metadata"]["name"].as_str().unwrap_or_default();
        let stored = bsl_status(&kubectl, &ns, name);
        assert_eq!(bsl["status"]["phase"], stored["phase"], "{name}");
        assert_eq!(
            bsl["status"]["lastValidationTime"], stored["lastValidationTime"],
            "{name}"
        );
        assert!(stored["lastValidationTime"].is_string(), "{name}: {stored}");
    }

    // The table a user reads: Velero's PHASE and LAST VALIDATED columns, filled.
    let out = velero::cli(plane, &ns, &["backup-location", "get"]);
    assert!(out.success, "velero backup-location get: {}", out.stderr);
    let header = out.stdout.lines().next().unwrap_or_default();
    assert!(
        header.contains("PHASE") && header.contains("LAST VALIDATED"),
        "{}",
        out.stdout
    );
    let row = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{}", out.stdout))
            .to_string()
    };
    assert!(row("good").contains("Available"), "{}", out.stdout);
    assert!(row("bad").contains("Unavailable"), "{}", out.stdout);
}

/// `velero backup create --wait`, then the backup as Velero reports it.
fn backup(plane: &ControlPlane, ns: &str, name: &str, app: &str, location: &str) -> Value {
    let out = velero::cli(
        plane,
        ns,
        &[
            "backup",
            "create",
            name,
            "--include-namespaces",
            app,
            "--snapshot-volumes=false",
            "--storage-location",
            location,
            "--wait",
        ],
    );
    assert!(out.success, "velero backup create {name}: {}", out.stderr);
    let out = velero::cli(plane, ns, &["backup", "get", name, "-o", "json"]);
    assert!(out.success, "velero backup get {name}: {}", out.stderr);
    objects(&out.stdout).swap_remove(0)
}

async fn objects_under(store: &dyn object_store::ObjectStore, prefix: &str) -> Vec<String> {
    let prefix = object_store::path::Path::from(prefix);
    store
        .list(Some(&prefix))
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("listing {prefix}: {e}"))
}

/// The seed's promise end to end: backups go on to the Available location while another is
/// Unavailable; once its storage is back, bsl-sentinel moves its phase and backups there work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_complete_to_an_available_bsl_and_fail_validation_on_an_unavailable_one() {
    let plane = ControlPlane::get(Crd::Velero);
    velero::install_crds(plane, Crd::Velero);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("velero-backup");
    let app = plane.namespace("velero-app");
    kubectl.ok(&[
        "create",
        "configmap",
        "app-settings",
        "-n",
        &app,
        "--from-literal=k=v",
    ]);
    let s3 = SeaweedFs::shared();
    let bucket = format!("{ns}-backups");
    s3.create_bucket(&bucket).await;
    let flaky = SeaweedFs::dedicated();
    flaky.stop();
    apply_bsl(&kubectl, &ns, "good", &s3.location(&bucket, None));
    apply_bsl(&kubectl, &ns, "flaky", &flaky.location("flaky", None));
    let _sentinel = Sentinel::start(plane, &ns, "velero-backup", &[]).await;
    wait_phase(&kubectl, &ns, "good", "Available").await;
    wait_phase(&kubectl, &ns, "flaky", "Unavailable").await;
    // README's "bsl-sentinel validates" mode.
    let mut server = VeleroServer::start(plane, &ns, &["--store-validation-frequency=0"]);

    let done = backup(plane, &ns, "to-good", &app, "good");
    assert_eq!(done["status"]["phase"], "Completed", "{done}");
    let written = objects_under(&*s3.store(&bucket), "backups/to-good").await;
    assert!(
        written.iter().any(|k| k.ends_with("to-good.tar.gz")),
        "{written:?}"
    );

    let failed = backup(plane, &ns, "to-flaky", &app, "flaky");
    assert_eq!(failed["status"]["phase"], "FailedValidation", "{failed}");
    let errors = failed["status"]["validationErrors"].to_string();
    assert!(errors.contains("Unavailable"), "{errors}");

    // The storage comes back (a restarted SeaweedFS starts empty: its bucket is made again).
    flaky.start();
    flaky.create_bucket("flaky").await;
    wait_phase(&kubectl, &ns, "flaky", "Available").await;
    let done = backup(plane, &ns, "to-flaky-again", &app, "flaky");
    assert_eq!(done["status"]["phase"], "Completed", "{done}");
    let written = objects_under(&*flaky.store("flaky"), "backups/to-flaky-again").await;
    assert!(!written.is_empty(), "nothing written to the flaky bucket");
    assert!(
        server.is_running(),
        "velero server exited:\n{}",
        server.log_text()
    );
}

/// Velero's own CLI creating BSLs goes through the webhook like kubectl does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn velero_backup_location_create_is_checked_by_the_webhook() {
    let plane = ControlPlane::get(Crd::Velero);
    velero::install_crds(plane, Crd::Velero);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("velero-create");
    let _webhook = crate::support::webhook::InProcess::start(plane, &ns).await;
    let s3 = SeaweedFs::shared();
    let bucket = format!("{ns}-backups");
    s3.create_bucket(&bucket).await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cloud"},
                        "stringData": {"cloud": s3.credentials()}});
    assert!(kubectl.apply(&ns, &secret.to_string()).success);

    let out = velero::cli(
        plane,
        &ns,
        &[
            "backup-location",
            "create",
            "malformed",
            "--provider",
            "aws",
            "--bucket",
            "backups/daily",
            "--config",
            "region=us-east-1,s3ForcePathStyle=maybe",
        ],
    );
    assert!(
        !out.success,
        "velero created a malformed BSL: {}",
        out.stdout
    );
    for needle in [
        "spec.objectStorage.bucket: Invalid value: \"backups/daily\"",
        "spec.config.s3ForcePathStyle: Invalid value: \"maybe\"",
    ] {
        assert!(
            out.stderr.contains(needle),
            "missing {needle:?} in velero's output:\n{}",
            out.stderr
        );
    }
    let listed = kubectl.run(&["get", "bsl", "malformed", "-n", &ns]);
    assert!(!listed.success, "the malformed BSL exists");

    let config = format!(
        "region=us-east-1,s3ForcePathStyle=true,s3Url={}",
        s3.endpoint
    );
    let out = velero::cli(
        plane,
        &ns,
        &[
            "backup-location",
            "create",
            "primary",
            "--provider",
            "aws",
            "--bucket",
            &bucket,
            "--config",
            &config,
            "--credential",
            "cloud=cloud",
        ],
    );
    assert!(out.success, "velero backup-location create: {}", out.stderr);
    let _sentinel = Sentinel::start(plane, &ns, "velero-create", &[]).await;
    wait_phase(&kubectl, &ns, "primary", "Available").await;
}

/// Every status write to one BSL, as `kubectl get -w` delivers them: "time|phase|message".
struct StatusWrites {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl StatusWrites {
    fn watch(plane: &ControlPlane, ns: &str, name: &str) -> StatusWrites {
        use std::io::BufRead;
        let mut child = std::process::Command::new(plane.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(&plane.kubeconfig)
            .args(["get", "bsl", name, "-n", ns, "-w", "-o"])
            .arg("jsonpath={.status.lastValidationTime}|{.status.phase}|{.status.message}{\"\\n\"}")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("kubectl get -w: {e}"));
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        if let Some(out) = child.stdout.take() {
            let sink = lines.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            });
        }
        StatusWrites { child, lines }
    }

    fn seen(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for StatusWrites {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The writes from bsl-sentinel's first on (before it, the BSL had no status yet).
fn from_our_first(seen: &[String], name: &str) -> Vec<String> {
    let first = seen
        .iter()
        .position(|w| ours(w, name))
        .unwrap_or(seen.len());
    seen[first..].to_vec()
}

/// A write of bsl-sentinel's own check. Velero words its message the same way up to the
/// colon; what follows is its plugin's gRPC error ("rpc error: ..."), ours names the endpoint.
fn ours(write: &str, name: &str) -> bool {
    let message = write.splitn(3, '|').nth(2).unwrap_or_default();
    message
        .strip_prefix(&format!(
            "BackupStorageLocation \"{name}\" is unavailable: "
        ))
        .is_some_and(|cause| !cause.starts_with("rpc error:"))
}

/// Both validators on with their default settings (each BSL asks for a check every 3 s, which
/// both honour): they overwrite each other, and bsl-sentinel says so once, naming the BSL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_both_validating_bsl_sentinel_names_the_other_writer_once() {
    let plane = ControlPlane::get(Crd::Velero);
    velero::install_crds(plane, Crd::Velero);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("velero-both");
    let s3 = SeaweedFs::shared();
    let bucket = format!("{ns}-backups");
    s3.create_bucket(&bucket).await;
    let closed = format!("http://127.0.0.1:{}", free_port());
    let every = json!({"validationFrequency": "3s"});
    apply_bsl_with(
        &kubectl,
        &ns,
        "good",
        &s3.location(&bucket, None),
        every.clone(),
    );
    apply_bsl_with(
        &kubectl,
        &ns,
        "bad",
        &s3.location_via(&closed, &bucket, None),
        every,
    );
    let writes = StatusWrites::watch(plane, &ns, "bad");
    let sentinel = Sentinel::start(plane, &ns, "velero-both", &[]).await;
    wait_phase(&kubectl, &ns, "bad", "Unavailable").await;
    let mut server = VeleroServer::start(plane, &ns, &[]);
    let id = format!("{ns}/bad");
    eventually(
        "bsl-sentinel to name the other writer in its server status",
        Duration::from_secs(60),
        || async {
            let (code, body) = sentinel.get("/status");
            let status: Value = serde_json::from_str(&body).unwrap_or_default();
            let named = status["otherWriters"]
                .as_array()
                .is_some_and(|w| w.iter().any(|b| b == id.as_str()));
            if code == 200 && named {
                Ok(())
            } else {
                Err(format!("{code} {body}"))
            }
        },
    )
    .await;
    // Several more rounds of both: still said once for this BSL.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let log = sentinel.log_text();
    let said = log
        .lines()
        .filter(|l| l.contains("another writer changed this BSL's status") && l.contains(&id))
        .count();
    assert_eq!(said, 1, "{log}");
    let seen = from_our_first(&writes.seen(), "bad");
    let theirs = seen.iter().filter(|w| !ours(w, "bad")).count();
    eprintln!(
        "status writes to bad: {} ({theirs} not bsl-sentinel's):\n{}",
        seen.len(),
        seen.join("\n")
    );
    assert!(theirs > 0, "no write by Velero seen: {seen:?}");
    // Whoever wrote, the phase never flapped.
    assert!(seen.iter().all(|w| w.contains("|Unavailable|")), "{seen:?}");
    assert!(server.is_running(), "{}", server.log_text());
}

/// README's "bsl-sentinel validates" mode: Velero with --store-validation-frequency=0. Velero
/// still validates each BSL once when its server starts; after that every status write is
/// bsl-sentinel's, and Velero's backup sync keeps writing lastSyncedTime beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_velero_validating_only_at_start_bsl_sentinel_is_the_only_writer_after_it() {
    let plane = ControlPlane::get(Crd::Velero);
    velero::install_crds(plane, Crd::Velero);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("velero-once");
    let s3 = SeaweedFs::shared();
    let bucket = format!("{ns}-backups");
    s3.create_bucket(&bucket).await;
    let closed = format!("http://127.0.0.1:{}", free_port());
    apply_bsl(&kubectl, &ns, "good", &s3.location(&bucket, None));
    apply_bsl(
        &kubectl,
        &ns,
        "bad",
        &s3.location_via(&closed, &bucket, None),
    );
    let writes = StatusWrites::watch(plane, &ns, "bad");
    let _sentinel = Sentinel::start(plane, &ns, "velero-once", &[]).await;
    wait_phase(&kubectl, &ns, "bad", "Unavailable").await;
    let mut server = VeleroServer::start(
        plane,
        &ns,
        &["--store-validation-frequency=0", "--backup-sync-period=2s"],
    );
    let started = from_our_first(&writes.seen(), "bad").len();
    // Several of bsl-sentinel's periods (2 s in tests), Velero's start-up included.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let seen = from_our_first(&writes.seen(), "bad");
    let after = &seen[started..];
    let theirs: Vec<&String> = after.iter().filter(|w| !ours(w, "bad")).collect();
    let velero_log = server.log_text();
    let validated: Vec<&str> = velero_log
        .lines()
        .filter(|l| l.contains("Validating BackupStorageLocation") && !l.contains("availability"))
        .map(|l| l.get(..200).unwrap_or(l))
        .collect();
    eprintln!(
        "after Velero's start: {} writes to bad, {} of them Velero's: {theirs:?}\nVelero validated: {validated:?}",
        after.len(),
        theirs.len()
    );
    assert!(after.len() >= 5, "too few writes to tell: {after:?}");
    // At most its one start-up round (it reconciles every BSL once when it starts); then only
    // bsl-sentinel writes, and the phase never flaps.
    assert!(theirs.len() <= 1, "Velero kept writing: {theirs:?}");
    assert!(
        after[after.len() - 4..].iter().all(|w| ours(w, "bad")),
        "{after:?}"
    );
    assert!(
        after.iter().all(|w| w.contains("|Unavailable|")),
        "{after:?}"
    );
    // Backup sync writes lastSyncedTime to the Available BSL; bsl-sentinel's writes keep it.
    let synced = eventually("Velero's backup sync", Duration::from_secs(30), || async {
        let status = bsl_status(&kubectl, &ns, "good");
        match status["lastSyncedTime"].as_str() {
            Some(t) => Ok((t.to_string(), status["lastValidationTime"].clone())),
            None => Err(status.to_string()),
        }
    })
    .await;
    eventually(
        "a later bsl-sentinel check of good",
        Duration::from_secs(30),
        || async {
            let status = bsl_status(&kubectl, &ns, "good");
            if status["lastValidationTime"] != synced.1 && status["lastSyncedTime"].is_string() {
                Ok(())
            } else {
                Err(status.to_string())
            }
        },
    )
    .await;
    assert!(server.is_running(), "{}", server.log_text());
}

/// bsl-sentinel in README's webhook-only mode: the real binary with `--reconciler=false`,
/// serving the webhook (webhook-config/ as shipped) for `ns` only.
async fn webhook_only(plane: &'static ControlPlane, ns: &str) -> (Sentinel, SecretMount) {
    let mount = SecretMount::new(&plane.dir.join(format!("webhook-only-{ns}")));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let sentinel =
        Sentinel::start_webhook_only(&binary(), plane, ns, "webhook-only", &mount, addr, &[]).await;
    register(&plane.kubectl(), ns, addr, &mount.ca.cert_pem()).await;
    (sentinel, mount)
}

/// Webhook-only mode beside a Velero server that validates with its default settings: every
/// write Velero makes lands. Its status writes (validation, backup sync's lastSyncedTime) are
/// never sent to the webhook (matchConditions), and the spec writes of its CLI (a create, the
/// default moved from one BSL to another) are reviewed and admitted, while a malformed spec
/// edit in the same namespace is still denied.
async fn webhook_only_admits_every_velero_write(crd: Crd) {
    let plane = ControlPlane::get(crd);
    velero::install_crds(plane, crd);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("velero-webhook-only");
    let s3 = SeaweedFs::shared();
    let bucket = format!("{ns}-backups");
    s3.create_bucket(&bucket).await;
    let (sentinel, _mount) = webhook_only(plane, &ns).await;
    let closed = format!("http://127.0.0.1:{}", free_port());
    let every = json!({"validationFrequency": "3s"});
    apply_bsl_with(
        &kubectl,
        &ns,
        "good",
        &s3.location(&bucket, None),
        json!({"validationFrequency": "3s", "default": true}),
    );
    apply_bsl_with(
        &kubectl,
        &ns,
        "bad",
        &s3.location_via(&closed, &bucket, None),
        every,
    );
    let writes = StatusWrites::watch(plane, &ns, "bad");
    let mut server = VeleroServer::start(plane, &ns, &["--backup-sync-period=2s"]);

    // Velero's own validation writes, round after round.
    wait_phase(&kubectl, &ns, "good", "Available").await;
    eventually(
        "several validation rounds by Velero",
        Duration::from_secs(60),
        || async {
            let seen = writes.seen();
            let velero = seen
                .iter()
                .filter(|w| w.contains("is unavailable: rpc error:"))
                .count();
            if velero >= 3 {
                Ok(())
            } else {
                Err(seen.join("\n"))
            }
        },
    )
    .await;
    assert!(
        writes.seen().iter().all(|w| !ours(w, "bad")),
        "bsl-sentinel wrote status in webhook-only mode: {:?}",
        writes.seen()
    );

    // Velero's CLI: a create, then the default moved to it (spec updates).
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cloud"},
                        "stringData": {"cloud": s3.credentials()}});
    assert!(kubectl.apply(&ns, &secret.to_string()).success);
    let config = format!(
        "region=us-east-1,s3ForcePathStyle=true,s3Url={}",
        s3.endpoint
    );
    let out = velero::cli(
        plane,
        &ns,
        &[
            "backup-location",
            "create",
            "second",
            "--provider",
            "aws",
            "--bucket",
            &bucket,
            "--config",
            &config,
            "--credential",
            "cloud=cloud",
        ],
    );
    assert!(out.success, "velero backup-location create: {}", out.stderr);
    // Velero's CLI moves the default in two steps (it refuses a second default).
    for (name, flag) in [("good", "--default=false"), ("second", "--default")] {
        let out = velero::cli(plane, &ns, &["backup-location", "set", name, flag]);
        assert!(
            out.success,
            "velero backup-location set {name} {flag}: {}",
            out.stderr
        );
    }
    let default = |name: &str| {
        let out = kubectl.ok(&[
            "get",
            "bsl",
            name,
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.default}",
        ]);
        out.stdout == "true"
    };
    assert!(
        default("second") && !default("good"),
        "the default did not move"
    );
    wait_phase(&kubectl, &ns, "second", "Available").await;

    // The webhook reviews spec edits in this namespace all along: a malformed one is denied.
    let out = kubectl.run(&[
        "patch",
        "bsl",
        "bad",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"objectStorage":{"bucket":"a/b"}}}"#,
    ]);
    assert!(!out.success, "a malformed edit was admitted");
    assert!(
        out.stderr.contains("spec.objectStorage.bucket"),
        "{}",
        out.stderr
    );
    // Backup sync's write. Velero queues its sync once a minute, and its first round (at start)
    // skipped the BSLs that had no phase yet.
    eventually("Velero's backup sync", Duration::from_secs(90), || async {
        let status = bsl_status(&kubectl, &ns, "second");
        if status["lastSyncedTime"].is_string() {
            Ok(())
        } else {
            Err(status.to_string())
        }
    })
    .await;
    let velero_log = server.log_text();
    for refused in ["denied the request", "admission webhook"] {
        assert!(
            !velero_log.contains(refused),
            "a Velero write was refused ({refused}):\n{velero_log}"
        );
    }
    assert!(server.is_running(), "{velero_log}");
    let log = sentinel.log_text();
    assert!(
        !log.contains("Forbidden") && !log.contains("ERROR"),
        "bsl-sentinel logged an error:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_only_admits_every_velero_write_on_velero_crd() {
    webhook_only_admits_every_velero_write(Crd::Velero).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_only_admits_every_velero_write_on_the_projects_crd() {
    webhook_only_admits_every_velero_write(Crd::Project).await;
}

/// `status.lastValidationTime` changes, then the status: the next write after `before`.
async fn next_validation(kubectl: &Kubectl, ns: &str, name: &str, before: &Value) -> Value {
    eventually(
        &format!("a new validation of {name}"),
        Duration::from_secs(60),
        || async {
            let status = bsl_status(kubectl, ns, name);
            if status["lastValidationTime"].is_string() && status["lastValidationTime"] != *before {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        },
    )
    .await
}

/// Velero's layout rule and bsl-sentinel's agree, each validating alone in turn: a prefix that
/// Velero itself wrote a backup under is Available for both; once foreign top-level
/// directories appear there, it is Unavailable for both, naming the same directories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn velero_and_bsl_sentinel_agree_on_the_layout_of_a_bucket_velero_wrote() {
    let plane = ControlPlane::get(Crd::Velero);
    velero::install_crds(plane, Crd::Velero);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("velero-layout");
    let app = plane.namespace("velero-layout-app");
    kubectl.ok(&[
        "create",
        "configmap",
        "app-settings",
        "-n",
        &app,
        "--from-literal=k=v",
    ]);
    let s3 = SeaweedFs::shared();
    let bucket = format!("{ns}-backups");
    s3.create_bucket(&bucket).await;
    apply_bsl_with(
        &kubectl,
        &ns,
        "primary",
        &s3.location(&bucket, Some("cluster-a")),
        json!({"validationFrequency": "3s"}),
    );
    let server = VeleroServer::start(plane, &ns, &[]);
    wait_phase(&kubectl, &ns, "primary", "Available").await;
    let done = backup(plane, &ns, "first", &app, "primary");
    assert_eq!(done["status"]["phase"], "Completed", "{done}");
    let store = s3.store(&bucket);
    let written = objects_under(&*store, "cluster-a").await;
    assert!(
        written
            .iter()
            .any(|k| k.starts_with("cluster-a/backups/first/")),
        "{written:?}"
    );
    drop(server);

    // bsl-sentinel alone on what Velero wrote.
    let before = bsl_status(&kubectl, &ns, "primary")["lastValidationTime"].clone();
    let sentinel = Sentinel::start(plane, &ns, "velero-layout", &[]).await;
    let ours_ok = next_validation(&kubectl, &ns, "primary", &before).await;
    assert_eq!(ours_ok["phase"], "Available", "{ours_ok}");

    // Two foreign top-level directories beside Velero's.
    put_all(
        &*store,
        &["cluster-a/exports/2026.csv", "cluster-a/tmp/scratch"],
    )
    .await;
    wait_phase(&kubectl, &ns, "primary", "Unavailable").await;
    let ours_bad = bsl_status(&kubectl, &ns, "primary");
    drop(sentinel);

    // Velero alone on the same prefix.
    let server = VeleroServer::start(plane, &ns, &[]);
    let theirs = next_validation(&kubectl, &ns, "primary", &ours_bad["lastValidationTime"]).await;
    drop(server);
    assert_eq!(theirs["phase"], "Unavailable", "{theirs}");
    let named = |status: &Value| {
        let message = status["message"].as_str().unwrap_or_default().to_string();
        let list = message
            .split_once("invalid top-level directories: [")
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(dirs, _)| dirs.to_string());
        (list, message)
    };
    let (ours_dirs, ours_message) = named(&ours_bad);
    let (their_dirs, their_message) = named(&theirs);
    assert_eq!(
        ours_dirs.as_deref(),
        Some("exports tmp"),
        "bsl-sentinel: {ours_message}"
    );
    assert_eq!(
        their_dirs, ours_dirs,
        "Velero: {their_message}\nbsl-sentinel: {ours_message}"
    );
}
