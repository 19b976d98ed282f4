//! Helpers for webhook tests: certificate folders laid out like a mounted Secret, and
//! AdmissionReview bodies like the apiserver sends.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::pki::{Ca, Pem};
use serde_json::{Value, json};

/// A folder laid out as the kubelet mounts a Secret: `tls.crt -> ..data/tls.crt`,
/// `..data -> ..<version>`; an update writes a new version folder and swaps `..data` atomically.
pub struct SecretMount {
    pub dir: PathBuf,
    pub ca: Ca,
    version: usize,
}

impl SecretMount {
    pub fn new(dir: &Path) -> SecretMount {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let ca = Ca::new("webhook CA").unwrap_or_else(|e| panic!("CA: {e}"));
        let mut mount = SecretMount {
            dir: dir.to_path_buf(),
            ca,
            version: 0,
        };
        let pem = mount.issue();
        mount.update(&pem);
        for file in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{file}"), dir.join(file))
                .unwrap_or_else(|e| panic!("symlink {file}: {e}"));
        }
        mount
    }

    /// A serving certificate for 127.0.0.1 from the mount's CA.
    pub fn issue(&self) -> Pem {
        self.ca
            .issue_server(&["localhost"], &[Ipv4Addr::LOCALHOST.into()])
            .unwrap_or_else(|e| panic!("certificate: {e}"))
    }

    /// What the kubelet does on a Secret update.
    pub fn update(&mut self, pem: &Pem) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        let target = self.dir.join(&version);
        std::fs::create_dir_all(&target).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(target.join("tls.crt"), &pem.cert).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(target.join("tls.key"), &pem.key).unwrap_or_else(|e| panic!("{e}"));
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&version, &tmp).unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    pub fn key(&self) -> PathBuf {
        self.dir.join("tls.key")
    }
}

/// A BackupStorageLocation manifest.
pub fn bsl(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": name, "namespace": "velero"},
        "spec": spec
    })
}

/// An AdmissionReview v1 request as the apiserver sends it.
pub fn review(
    uid: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    dry_run: bool,
) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "velero.io", "version": "v1", "kind": "BackupStorageLocation"},
            "resource": {"group": "velero.io", "version": "v1", "resource": "backupstoragelocations"},
            "requestKind": {"group": "velero.io", "version": "v1", "kind": "BackupStorageLocation"},
            "requestResource": {"group": "velero.io", "version": "v1", "resource": "backupstoragelocations"},
            "name": object["metadata"]["name"],
            "namespace": "velero",
            "operation": operation,
            "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// Applies webhook-config/`file` as shipped under the name `name`, its webhook called at
/// `url(shipped path)` (a url clientConfig with the CA as caBundle: no Service can be routed here) and
/// limited to `namespace`.
pub fn apply_config(
    kubectl: &super::Kubectl,
    file: &str,
    name: &str,
    namespace: &str,
    url: &dyn Fn(&str) -> String,
    ca_pem: &str,
) {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let path = super::repo_root().join("webhook-config").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut config: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    config["metadata"]["name"] = json!(name);
    for webhook in config["webhooks"].as_array_mut().into_iter().flatten() {
        let path = webhook["clientConfig"]["service"]["path"].clone();
        let url = url(path.as_str().unwrap_or_default());
        webhook["clientConfig"] = json!({"url": url, "caBundle": ca});
        let only_here =
            json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]});
        if let Some(exprs) = webhook["namespaceSelector"]["matchExpressions"].as_array_mut() {
            exprs.push(only_here);
        }
    }
    let out = kubectl.run_with_stdin(&["apply", "-f", "-"], &config.to_string());
    assert!(out.success, "registering {file}: {}", out.stderr);
}

/// Registers webhook-config/ as shipped, pointed at a webhook on `addr` and limited to
/// `namespace`; returns once the apiserver calls it.
pub async fn register(
    kubectl: &super::Kubectl,
    namespace: &str,
    addr: std::net::SocketAddr,
    ca_pem: &str,
) {
    let name = format!("bsl-sentinel-{namespace}");
    let url = |path: &str| format!("https://{addr}{path}");
    for file in ["validating.yaml", "mutating.yaml"] {
        apply_config(kubectl, file, &name, namespace, &url, ca_pem);
    }
    // The apiserver picks up webhook configurations asynchronously.
    let probe = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "probe"},
                       "spec": {"provider": "", "objectStorage": {"bucket": "b"}}});
    super::eventually(
        "the apiserver to call the webhook",
        std::time::Duration::from_secs(20),
        || async {
            let out = kubectl.run_with_stdin(
                &["apply", "--dry-run=server", "-n", namespace, "-f", "-"],
                &probe.to_string(),
            );
            if !out.success && out.stderr.contains("spec.provider: Required value") {
                Ok(())
            } else {
                Err(out.stderr)
            }
        },
    )
    .await
}

/// The webhook served in the test's own runtime on a free port, with a certificate from its
/// own CA, registered (webhook-config/ as shipped) for `namespace` only; returns once the
/// apiserver calls it.
pub struct InProcess {
    pub mount: SecretMount,
    pub addr: std::net::SocketAddr,
}

impl InProcess {
    pub async fn start(plane: &super::ControlPlane, namespace: &str) -> InProcess {
        use bsl_sentinel::serve::{WebhookArgs, start_webhook, watch_served_crd};
        use std::net::{Ipv4Addr, SocketAddr};
        use std::time::Duration;
        let mount = SecretMount::new(&plane.dir.join(format!("webhook-{namespace}")));
        let config = WebhookArgs {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            cert: mount.cert(),
            key: mount.key(),
            cert_reload_interval: Duration::from_millis(100),
            workers: 1,
        };
        let client = plane.client().await;
        let served = watch_served_crd(client.clone(), Duration::from_secs(5));
        let running = start_webhook(
            &config,
            namespace,
            client,
            served.clone(),
            bsl_sentinel::readiness::Readiness::new(served),
        )
        .unwrap_or_else(|e| panic!("webhook: {e}"));
        tokio::spawn(running.server);
        let webhook = InProcess {
            mount,
            addr: running.addr,
        };
        let tls = super::https::client_config(&webhook.mount.ca.cert_pem());
        super::eventually(
            "the webhook to be ready",
            Duration::from_secs(20),
            || async {
                let mut conn = super::https::connect(webhook.addr, tls.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                match conn.get("/readyz").await.0 {
                    200 => Ok(()),
                    status => Err(format!("/readyz answers {status}")),
                }
            },
        )
        .await;
        register(
            &plane.kubectl(),
            namespace,
            webhook.addr,
            &webhook.mount.ca.cert_pem(),
        )
        .await;
        webhook
    }
}
