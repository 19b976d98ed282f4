//! The real kube-apiserver calls the in-process webhook over TLS (url clientConfig to
//! 127.0.0.1 with a caBundle), with the configurations from webhook-config/.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine;
use bsl_sentinel::admission::PENDING_MESSAGE;
use serde_json::{Value, json};

use crate::support::https;
use crate::support::webhook::{InProcess, SecretMount};
use crate::support::{ControlPlane, Crd, Kubectl, eventually};

struct Setup {
    plane: &'static ControlPlane,
    ns: String,
    mount: SecretMount,
    addr: SocketAddr,
}

impl Setup {
    async fn new(crd: Crd, tag: &str) -> Setup {
        let plane = ControlPlane::get(crd);
        let ns = plane.namespace(tag);
        let webhook = InProcess::start(plane, &ns).await;
        Setup {
            plane,
            ns,
            mount: webhook.mount,
            addr: webhook.addr,
        }
    }

    fn kubectl(&self) -> Kubectl {
        self.plane.kubectl()
    }

    fn apply(&self, manifest: &Value) -> crate::support::Output {
        self.kubectl().apply(&self.ns, &manifest.to_string())
    }

    fn apply_dry_run(&self, manifest: &Value) -> crate::support::Output {
        self.kubectl().run_with_stdin(
            &[
                "apply",
                "--dry-run=server",
                "-n",
                &self.ns,
                "-f",
                "-",
                "-o",
                "json",
            ],
            &manifest.to_string(),
        )
    }

    fn get(&self, name: &str) -> Value {
        let out = self
            .kubectl()
            .ok(&["get", "bsl", name, "-n", &self.ns, "-o", "json"]);
        serde_json::from_str(&out.stdout).unwrap_or_default()
    }
}

fn manifest(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": name}, "spec": spec})
}

fn malformed() -> Value {
    manifest(
        "malformed",
        json!({
            "provider": "aws",
            "objectStorage": {"bucket": "velero/backups"},
            "config": {"region": "us-east-1", "s3ForcePathStyle": "yes please", "signatureVersion": "3"},
            "credential": {"name": "cloud-credentials", "key": ""},
            "backupSyncPeriod": "-1m"
        }),
    )
}

fn valid(name: &str) -> Value {
    manifest(
        name,
        json!({"provider": "aws", "objectStorage": {"bucket": "velero"}, "config": {"region": "us-east-1"}}),
    )
}

fn assert_field_errors(stderr: &str) {
    for needle in [
        // The webhook answers with a 422 Invalid status and causes, so kubectl renders it as
        // it renders the apiserver's own field errors.
        "The BackupStorageLocation \"malformed\" is invalid: \n* ",
        "spec.credential.key: Required value",
        "spec.config.signatureVersion: Unsupported value: \"3\"",
        "spec.objectStorage.bucket: Invalid value: \"velero/backups\"",
        "spec.config.s3ForcePathStyle: Invalid value: \"yes please\"",
        "spec.backupSyncPeriod: Invalid value: \"-1m\"",
    ] {
        assert!(
            stderr.contains(needle),
            "missing {needle:?} in kubectl's output:\n{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_a_malformed_bsl_fails_with_field_messages() {
    for crd in [Crd::Project, Crd::Velero] {
        let setup = Setup::new(crd, "reject").await;
        let out = setup.apply(&malformed());
        assert!(!out.success, "{crd:?}: a malformed BSL was admitted");
        assert_field_errors(&out.stderr);
        let gone = setup
            .kubectl()
            .run(&["get", "bsl", "malformed", "-n", &setup.ns]);
        assert!(!gone.success, "{crd:?}: the malformed BSL exists");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_bsl_is_admitted_with_the_initial_phase_on_the_project_crd() {
    let setup = Setup::new(Crd::Project, "admit").await;
    let out = setup.apply(&valid("good"));
    assert!(out.success, "{}", out.stderr);
    let bsl = setup.get("good");
    assert_eq!(
        bsl["status"],
        json!({"phase": "Unknown", "message": PENDING_MESSAGE})
    );
    let table = setup
        .kubectl()
        .ok(&["get", "bsl", "good", "-n", &setup.ns])
        .stdout;
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|row| row.split_whitespace().nth(1) == Some("Unknown")),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_succeed_on_velero_stock_crd() {
    let setup = Setup::new(Crd::Velero, "stock").await;
    let out = setup.apply(&valid("good"));
    assert!(out.success, "create on Velero's CRD failed: {}", out.stderr);
    let bsl = setup.get("good");
    // No phase (Velero's enum has no Unknown): only the pending message.
    assert_eq!(bsl["status"], json!({"message": PENDING_MESSAGE}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_appear_in_kubectl_output() {
    let setup = Setup::new(Crd::Project, "warn").await;
    let mut first = valid("first");
    first["spec"]["default"] = json!(true);
    assert!(setup.apply(&first).success);

    let mut second = valid("second");
    second["spec"]["default"] = json!(true);
    second["spec"]["validationFrequency"] = json!("0s");
    second["spec"]["credential"] = json!({"name": "not-there", "key": "cloud"});
    second["spec"]["config"]["insecureSkipTLSVerify"] = json!("true");
    second["spec"]["objectStorage"]["caCert"] =
        json!(base64::engine::general_purpose::STANDARD.encode(setup.mount.ca.cert_pem()));
    // The default BSL reaches the webhook's watch cache shortly after its create.
    eventually(
        "the default-conflict warning",
        Duration::from_secs(20),
        || async {
            let out = setup.apply_dry_run(&second);
            if out.stderr.contains("\"first\" is already the default") {
                Ok(())
            } else {
                Err(out.stderr)
            }
        },
    )
    .await;
    let out = setup.apply(&second);
    assert!(out.success, "{}", out.stderr);
    for needle in [
        "Warning: spec.default: BackupStorageLocation \"first\" is already the default",
        "Warning: spec.credential.name: Secret \"not-there\" does not exist (yet)",
        "Warning: spec.config.insecureSkipTLSVerify",
        "Warning: spec.objectStorage.caCert",
        "Warning: spec.validationFrequency",
    ] {
        assert!(
            out.stderr.contains(needle),
            "missing {needle:?} in:\n{}",
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_dry_run_behaves_the_same() {
    let setup = Setup::new(Crd::Project, "dryrun").await;
    let out = setup.apply_dry_run(&malformed());
    assert!(!out.success);
    assert_field_errors(&out.stderr);

    let out = setup.apply_dry_run(&valid("dry"));
    assert!(out.success, "{}", out.stderr);
    let shown: Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    assert_eq!(shown["status"]["phase"], "Unknown", "{shown}");
    let persisted = setup.kubectl().run(&["get", "bsl", "dry", "-n", &setup.ns]);
    assert!(!persisted.success, "a dry run persisted the BSL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_swap_mid_test_keeps_serving() {
    let mut setup = Setup::new(Crd::Project, "rotate").await;
    assert!(setup.apply(&valid("before")).success);

    let tls = https::client_config(&setup.mount.ca.cert_pem());
    let old = https::connect(setup.addr, tls.clone())
        .await
        .map(|c| c.peer_cert)
        .unwrap_or_default();
    let next = setup.mount.issue();
    setup.mount.update(&next);
    eventually(
        "the rotated certificate to be served",
        Duration::from_secs(10),
        || async {
            let served = https::connect(setup.addr, tls.clone())
                .await
                .map(|c| c.peer_cert)
                .unwrap_or_default();
            if served == old {
                Err("the old one is served")
            } else {
                Ok(())
            }
        },
    )
    .await;

    let out = setup.apply(&malformed());
    assert!(!out.success);
    assert_field_errors(&out.stderr);
    let out = setup.apply(&valid("after"));
    assert!(out.success, "{}", out.stderr);
    assert_eq!(setup.get("after")["status"]["phase"], "Unknown");
}
