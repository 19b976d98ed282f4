//! Velero itself in the loop: the real Velero server, CLI and aws plugin (v1.18.3, v1.14.3)
//! beside bsl-sentinel, on Velero's stock CRD, with SeaweedFS as the object store.

use std::time::Duration;

use futures::TryStreamExt;
use serde_json::{Value, json};

use crate::support::control_plane::free_port;
use crate::support::sentinel::Sentinel;
use crate::support::storage::{Location, SeaweedFs};
use crate::support::velero::{self, VeleroServer};
use crate::support::{ControlPlane, Crd, Kubectl, eventually};

fn apply_bsl(kubectl: &Kubectl, ns: &str, name: &str, location: &Location) {
    let spec = location.spec_with_secret(kubectl, ns, &format!("{name}-credentials"));
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
