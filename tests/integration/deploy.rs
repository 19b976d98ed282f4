//! deploy/, certs/ and the webhook's certificate from the real cert-manager, against the real
//! control plane (the project CRD's apiserver; tests share it, so every cluster-scoped object
//! made here has a name of its own, and the namespace velero, which deploy/ hardcodes, is
//! created if absent and tolerated if present).
//!
//! cert-manager's controller and cainjector (tests/peers/build-cert-manager.sh) run as children
//! of the test binary, outside any cluster, with the test apiserver's kubeconfig.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine;
use bsl_sentinel::serve::{WebhookArgs, start_webhook, watch_served_crd};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

use crate::support::control_plane::{adopt, spawn};
use crate::support::https;
use crate::support::{ControlPlane, Crd, Kubectl, eventually, repo_root};

const SA: &str = "system:serviceaccount:velero:bsl-sentinel";

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Serializes the tests that write deploy/'s own objects in velero (a server dry run racing a
/// real create of the same object could see it appear halfway).
fn velero_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `kubectl create namespace`, tolerating one that exists (velero is shared by the tests here).
fn ensure_namespace(kubectl: &Kubectl, name: &str) {
    let out = kubectl.run(&["create", "namespace", name]);
    assert!(
        out.success || out.stderr.contains("AlreadyExists"),
        "creating namespace {name}: {}",
        out.stderr
    );
}

/// The objects `kubectl kustomize deploy/` renders, as JSON.
fn rendered_deploy(kubectl: &Kubectl) -> Vec<Value> {
    let dir = repo_root().join("deploy").display().to_string();
    let out = kubectl.ok(&["kustomize", &dir]);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&out.stdout)
        .unwrap_or_else(|e| panic!("kubectl kustomize deploy/ is not YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn secret_data(kubectl: &Kubectl, ns: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
    let out = kubectl.run(&["get", "secret", name, "-n", ns, "-o", "json"]);
    if !out.success {
        return None;
    }
    let secret: Value = serde_json::from_str(&out.stdout).ok()?;
    let data = secret["data"].as_object()?;
    Some(
        data.iter()
            .map(|(k, v)| {
                let bytes = b64()
                    .decode(v.as_str().unwrap_or_default())
                    .unwrap_or_else(|e| panic!("secret {name} key {k}: {e}"));
                (k.clone(), bytes)
            })
            .collect(),
    )
}

/// Waits for a Secret holding non-empty tls.crt, tls.key and ca.crt.
async fn wait_for_tls_secret(kubectl: &Kubectl, ns: &str, name: &str) -> BTreeMap<String, Vec<u8>> {
    eventually(
        &format!("Secret {ns}/{name} with tls.crt, tls.key and ca.crt"),
        Duration::from_secs(90),
        || async {
            secret_data(kubectl, ns, name)
                .filter(|d| {
                    ["tls.crt", "tls.key", "ca.crt"]
                        .iter()
                        .all(|k| d.get(*k).is_some_and(|v| !v.is_empty()))
                })
                .ok_or_else(|| "not there or incomplete".to_string())
        },
    )
    .await
}

fn leaf_der(pem: &[u8]) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem)
        .next()
        .unwrap_or_else(|| panic!("no certificate in {}", String::from_utf8_lossy(pem)))
        .unwrap_or_else(|e| panic!("certificate PEM: {e}"))
        .to_vec()
}

fn openssl_verify(ca: &Path, cert: &Path) -> (bool, String) {
    let out = Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(ca)
        .arg(cert)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

#[test]
fn deploy_crd_equals_the_bsl_sentinel_crd_output() {
    let out = Command::new(env!("CARGO_BIN_EXE_bsl-sentinel"))
        .arg("crd")
        .output()
        .unwrap_or_else(|e| panic!("bsl-sentinel crd: {e}"));
    assert!(out.status.success(), "bsl-sentinel crd failed");
    let generated = String::from_utf8_lossy(&out.stdout);
    let path = repo_root().join("deploy/crd/backupstoragelocations.velero.io.yaml");
    let committed =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        committed == generated,
        "{} differs from `bsl-sentinel crd`: regenerate it with\n  cargo run -q -- crd > deploy/crd/backupstoragelocations.velero.io.yaml",
        path.display()
    );
    let kustomization = std::fs::read_to_string(repo_root().join("deploy/crd/kustomization.yaml"))
        .unwrap_or_default();
    assert!(kustomization.contains("backupstoragelocations.velero.io.yaml"));
    // The default deploy leaves the CRD alone (Velero's keeps working).
    let main =
        std::fs::read_to_string(repo_root().join("deploy/kustomization.yaml")).unwrap_or_default();
    assert!(
        !main.lines().any(|l| l.trim_start().starts_with("- crd")),
        "deploy/ must not install the CRD"
    );
}

// ---- cert-manager ------------------------------------------------------------------------

pub(crate) struct CertManagerPeer {
    pub(crate) bin: PathBuf,
    pub(crate) crds: PathBuf,
}

/// tests/peers/build-cert-manager.sh: `bin=` and `crds=` lines on stdout.
pub(crate) fn cert_manager_peer() -> &'static CertManagerPeer {
    static PEER: OnceLock<CertManagerPeer> = OnceLock::new();
    PEER.get_or_init(|| {
        let [bin, crds] =
            crate::support::script_fields("tests/peers/build-cert-manager.sh", ["bin", "crds"]);
        CertManagerPeer { bin, crds }
    })
}

/// cert-manager's CRDs on `plane` (server-side: some are larger than the last-applied
/// annotation of a client-side apply may be).
pub(crate) fn apply_cert_manager_crds(plane: &ControlPlane) {
    let peer = cert_manager_peer();
    let kubectl = plane.kubectl();
    let crds = peer.crds.display().to_string();
    kubectl.ok(&["apply", "--server-side", "--force-conflicts", "-f", &crds]);
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/certificates.cert-manager.io",
        "crd/issuers.cert-manager.io",
        "crd/clusterissuers.cert-manager.io",
        "crd/certificaterequests.cert-manager.io",
    ]);
}

/// Once on the project plane.
fn install_cert_manager_crds(plane: &ControlPlane) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| apply_cert_manager_crds(plane));
}

/// The real cert-manager controller and cainjector for `plane`, logs named `{tag}{name}.log`.
/// No leader election (this build has none), no webhook (cert-manager's own webhook only
/// validates its resources; the CRDs' schemas still apply).
pub(crate) fn spawn_cert_manager(plane: &ControlPlane, tag: &str) -> Vec<std::process::Child> {
    let peer = cert_manager_peer();
    let kubeconfig = format!("--kubeconfig={}", plane.kubeconfig.display());
    [
        (
            "cert-manager-controller",
            vec![
                "--cluster-resource-namespace=kube-system",
                "--leader-elect=false",
            ],
        ),
        ("cert-manager-cainjector", vec!["--leader-elect=false"]),
    ]
    .into_iter()
    .map(|(name, extra)| {
        let mut cmd = Command::new(peer.bin.join(name));
        cmd.arg(&kubeconfig).args(extra);
        let log = plane.dir.join(format!("{tag}{name}.log"));
        eprintln!("{name}: log in {}", log.display());
        spawn(cmd, &log)
    })
    .collect()
}

/// Once per test binary on the project plane, as children that die with it.
fn start_cert_manager(plane: &ControlPlane) {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        install_cert_manager_crds(plane);
        for child in spawn_cert_manager(plane, "") {
            adopt(child);
        }
    });
}

// ---- a Secret mounted like the kubelet does it -------------------------------------------

/// A folder laid out as the kubelet mounts a Secret (`tls.crt -> ..data/tls.crt`,
/// `..data -> ..vN`); an update writes a new version and swaps `..data` atomically.
struct Mounted {
    dir: PathBuf,
    version: usize,
}

impl Mounted {
    fn new(dir: &Path, data: &BTreeMap<String, Vec<u8>>) -> Mounted {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut mount = Mounted {
            dir: dir.to_path_buf(),
            version: 0,
        };
        mount.update(data);
        for key in data.keys() {
            std::os::unix::fs::symlink(format!("..data/{key}"), dir.join(key))
                .unwrap_or_else(|e| panic!("symlink {key}: {e}"));
        }
        mount
    }

    fn update(&mut self, data: &BTreeMap<String, Vec<u8>>) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        let target = self.dir.join(&version);
        std::fs::create_dir_all(&target).unwrap_or_else(|e| panic!("{e}"));
        for (key, value) in data {
            write(&target.join(key), value);
        }
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&version, &tmp).unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The leaf certificate the webhook presents in a new TLS handshake.
async fn served_leaf(addr: SocketAddr, ca_pem: &[u8]) -> Option<Vec<u8>> {
    let tls = https::client_config(&String::from_utf8_lossy(ca_pem));
    https::connect(addr, tls).await.ok().map(|c| c.peer_cert)
}

fn malformed_bsl() -> Value {
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": "malformed"},
        "spec": {"provider": "", "objectStorage": {"bucket": "a/b"}}
    })
}

fn assert_rejected_with_field_messages(out: &crate::support::Output) {
    assert!(!out.success, "a malformed BSL was admitted");
    for needle in [
        "spec.provider: Required value",
        "spec.objectStorage.bucket: Invalid value: \"a/b\"",
    ] {
        assert!(
            out.stderr.contains(needle),
            "missing {needle:?} in kubectl's output:\n{}",
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_manager_issues_the_webhook_certificate_and_the_apiserver_calls_it() {
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    start_cert_manager(plane);
    let ns = plane.namespace("deploy-cm");

    // deploy/'s Issuer chain and serving Certificate, as shipped, in this test's namespace
    // (the file names no namespace; kustomize puts them in velero).
    let certificates = repo_root().join("deploy/certificates.yaml");
    kubectl.ok(&[
        "apply",
        "-n",
        &ns,
        "-f",
        &certificates.display().to_string(),
    ]);
    let ca = wait_for_tls_secret(&kubectl, &ns, "bsl-sentinel-ca").await;
    let serving = wait_for_tls_secret(&kubectl, &ns, "bsl-sentinel-webhook-tls").await;
    assert_eq!(
        leaf_der(&serving["ca.crt"]),
        leaf_der(&ca["tls.crt"]),
        "the serving Secret's ca.crt is the CA"
    );
    let dir = plane.dir.join(format!("deploy-{ns}"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    write(&dir.join("ca.crt"), &serving["ca.crt"]);
    write(&dir.join("service.crt"), &serving["tls.crt"]);
    let (ok, text) = openssl_verify(&dir.join("ca.crt"), &dir.join("service.crt"));
    assert!(ok, "the serving certificate does not verify: {text}");
    let sans = Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(dir.join("service.crt"))
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    let sans = String::from_utf8_lossy(&sans.stdout);
    for name in [
        "DNS:bsl-sentinel-webhook.velero.svc",
        "DNS:bsl-sentinel-webhook.velero.svc.cluster.local",
    ] {
        assert!(sans.contains(name), "{name} missing from {sans}");
    }

    // deploy/'s two webhook configurations, as kustomize renders them (with the inject-ca-from
    // annotation), renamed for this test and pointed at this namespace's Certificate. They
    // select no namespace: calling their Service would make the apiserver resolve
    // bsl-sentinel-webhook.velero.svc, and there is no cluster DNS or Service network here.
    let injected_name = format!("bsl-sentinel-injected-{ns}");
    let mut kinds = Vec::new();
    for mut doc in rendered_deploy(&kubectl) {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        if !kind.ends_with("WebhookConfiguration") {
            continue;
        }
        assert_eq!(
            doc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            json!("velero/bsl-sentinel-webhook"),
            "{kind} lacks the inject-ca-from annotation"
        );
        doc["metadata"]["name"] = json!(injected_name);
        doc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] =
            json!(format!("{ns}/bsl-sentinel-webhook"));
        for webhook in doc["webhooks"].as_array_mut().into_iter().flatten() {
            webhook["namespaceSelector"] =
                json!({"matchLabels": {"bsl-sentinel.test/never": "selected"}});
        }
        let out = kubectl.run_with_stdin(&["apply", "-f", "-"], &doc.to_string());
        assert!(out.success, "applying {kind}: {}", out.stderr);
        kinds.push(kind);
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration"
        ]
    );

    // cainjector fills caBundle of every webhook with the Certificate's CA.
    let want_bundle = b64().encode(&serving["ca.crt"]);
    let injected: BTreeMap<String, Value> = eventually(
        "cainjector to fill caBundle",
        Duration::from_secs(60),
        || async {
            let mut injected = BTreeMap::new();
            for kind in &kinds {
                let resource = kind.to_lowercase();
                let out = kubectl.run(&["get", &resource, &injected_name, "-o", "json"]);
                let doc = serde_json::from_str::<Value>(&out.stdout)
                    .map_err(|_| format!("{resource}: {}", out.stderr))?;
                let filled = doc["webhooks"].as_array().is_some_and(|w| {
                    w.iter()
                        .all(|w| w["clientConfig"]["caBundle"] == json!(want_bundle))
                });
                if !filled {
                    return Err(format!("{resource} has no caBundle yet"));
                }
                injected.insert(kind.clone(), doc);
            }
            Ok(injected)
        },
    )
    .await;

    // A test-only Certificate from the same CA Issuer, with IP SAN 127.0.0.1: the webhook runs
    // in-process on 127.0.0.1 (no Service can be routed here), so the apiserver calls it by
    // URL, and its certificate must name that address.
    let local = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "bsl-sentinel-webhook-local"},
        "spec": {
            "secretName": "bsl-sentinel-webhook-local-tls",
            "ipAddresses": ["127.0.0.1"],
            "dnsNames": ["localhost"],
            "duration": "2160h",
            "usages": ["server auth", "digital signature"],
            "privateKey": {"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8", "rotationPolicy": "Always"},
            "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": "bsl-sentinel-ca"}
        }
    });
    let out = kubectl.apply(&ns, &local.to_string());
    assert!(out.success, "{}", out.stderr);
    let first = wait_for_tls_secret(&kubectl, &ns, "bsl-sentinel-webhook-local-tls").await;
    assert_eq!(first["ca.crt"], serving["ca.crt"]);

    // bsl-sentinel's webhook on those files, laid out as the kubelet mounts the Secret.
    let mut mount = Mounted::new(&dir.join("tls"), &first);
    let client = plane.client().await;
    let served = watch_served_crd(client.clone(), Duration::from_secs(5));
    let config = WebhookArgs {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        cert: mount.dir.join("tls.crt"),
        key: mount.dir.join("tls.key"),
        cert_reload_interval: Duration::from_millis(100),
        workers: 1,
    };
    let running = start_webhook(
        &config,
        &ns,
        client,
        served.clone(),
        bsl_sentinel::readiness::Readiness::new(served),
    )
    .unwrap_or_else(|e| panic!("webhook: {e}"));
    let addr = running.addr;
    tokio::spawn(running.server);
    let ca_pem = serving["ca.crt"].clone();
    eventually(
        "the webhook to be ready",
        Duration::from_secs(30),
        || async {
            let tls = https::client_config(&String::from_utf8_lossy(&ca_pem));
            let mut conn = https::connect(addr, tls).await.map_err(|e| e.to_string())?;
            match conn.get("/readyz").await.0 {
                200 => Ok(()),
                status => Err(format!("/readyz answers {status}")),
            }
        },
    )
    .await;
    let before = served_leaf(addr, &ca_pem).await.unwrap_or_default();
    assert_eq!(
        before,
        leaf_der(&first["tls.crt"]),
        "serves the issued certificate"
    );

    // Copies of the injected configurations, pointed at the webhook by URL, keeping the
    // injected caBundle, selecting only this test's namespace.
    let url_name = format!("bsl-sentinel-url-{ns}");
    for (kind, doc) in &injected {
        let mut webhooks = doc["webhooks"].clone();
        for webhook in webhooks.as_array_mut().into_iter().flatten() {
            let path = webhook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let bundle = webhook["clientConfig"]["caBundle"].clone();
            assert_eq!(bundle, json!(want_bundle));
            webhook["clientConfig"] =
                json!({"url": format!("https://{addr}{path}"), "caBundle": bundle});
            webhook["namespaceSelector"] =
                json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
        }
        let copy = json!({
            "apiVersion": doc["apiVersion"],
            "kind": kind,
            "metadata": {"name": url_name},
            "webhooks": webhooks
        });
        let out = kubectl.run_with_stdin(&["apply", "-f", "-"], &copy.to_string());
        assert!(
            out.success,
            "applying the URL copy of {kind}: {}",
            out.stderr
        );
    }

    // The apiserver picks up webhook configurations asynchronously.
    eventually(
        "the apiserver to call the webhook",
        Duration::from_secs(30),
        || async {
            let out = kubectl.run_with_stdin(
                &["apply", "--dry-run=server", "-n", &ns, "-f", "-"],
                &malformed_bsl().to_string(),
            );
            if !out.success && out.stderr.contains("spec.provider: Required value") {
                Ok(())
            } else {
                Err(out.stderr)
            }
        },
    )
    .await;
    let out = kubectl.apply(&ns, &malformed_bsl().to_string());
    assert_rejected_with_field_messages(&out);

    // Renewal: cert-manager reissues when the Secret is gone; the files change under the
    // mount as the kubelet would write them, and the running webhook serves the new
    // certificate without a restart.
    kubectl.ok(&[
        "delete",
        "secret",
        "bsl-sentinel-webhook-local-tls",
        "-n",
        &ns,
    ]);
    let second = eventually(
        "cert-manager to reissue the certificate",
        Duration::from_secs(90),
        || async {
            match secret_data(&kubectl, &ns, "bsl-sentinel-webhook-local-tls") {
                Some(d)
                    if d.get("tls.crt").is_some_and(|c| *c != first["tls.crt"])
                        && d.get("tls.key").is_some_and(|k| !k.is_empty())
                        && d.get("ca.crt").is_some_and(|k| !k.is_empty()) =>
                {
                    Ok(d)
                }
                _ => Err("the old certificate or none".to_string()),
            }
        },
    )
    .await;
    assert_ne!(
        second["tls.key"], first["tls.key"],
        "rotationPolicy Always: a new key"
    );
    mount.update(&second);
    let want = leaf_der(&second["tls.crt"]);
    eventually(
        "the webhook to serve the new certificate",
        Duration::from_secs(20),
        || async {
            if served_leaf(addr, &ca_pem).await.as_deref() == Some(want.as_slice()) {
                Ok(())
            } else {
                Err("it serves the old one".to_string())
            }
        },
    )
    .await;
    assert_ne!(before, want);
    // Same CA, so the injected caBundle still holds: the apiserver keeps calling it.
    let out = kubectl.apply(&ns, &malformed_bsl().to_string());
    assert_rejected_with_field_messages(&out);

    for name in [&injected_name, &url_name] {
        for resource in [
            "validatingwebhookconfiguration",
            "mutatingwebhookconfiguration",
        ] {
            kubectl.run(&["delete", resource, name, "--ignore-not-found"]);
        }
    }
}

// ---- kustomize dry run and RBAC ----------------------------------------------------------

#[test]
fn deploy_applies_with_server_dry_run() {
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    install_cert_manager_crds(plane);
    let _velero = velero_lock();
    // deploy/ puts everything in velero; a server dry run of namespaced objects needs the
    // namespace to exist for real.
    ensure_namespace(&kubectl, "velero");
    let dir = repo_root().join("deploy").display().to_string();
    let out = kubectl.ok(&["apply", "--dry-run=server", "-k", &dir]);
    for object in [
        "serviceaccount/bsl-sentinel",
        "role.rbac.authorization.k8s.io/bsl-sentinel",
        "clusterrole.rbac.authorization.k8s.io/bsl-sentinel",
        "rolebinding.rbac.authorization.k8s.io/bsl-sentinel",
        "clusterrolebinding.rbac.authorization.k8s.io/bsl-sentinel",
        "service/bsl-sentinel-webhook",
        "deployment.apps/bsl-sentinel",
        "poddisruptionbudget.policy/bsl-sentinel",
        "issuer.cert-manager.io/bsl-sentinel-selfsigned",
        "issuer.cert-manager.io/bsl-sentinel-ca",
        "certificate.cert-manager.io/bsl-sentinel-ca",
        "certificate.cert-manager.io/bsl-sentinel-webhook",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/bsl-sentinel",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/bsl-sentinel",
    ] {
        assert!(
            out.stdout.contains(object),
            "{object} missing from the dry run:\n{}",
            out.stdout
        );
    }
    // The project's CRD kustomization, too. On this plane it is the installed CRD, so this is
    // an unchanged update.
    let crd = repo_root().join("deploy/crd").display().to_string();
    kubectl.ok(&["apply", "--dry-run=server", "-k", &crd]);

    // What the Deployment promises, read from the rendered objects.
    let docs = rendered_deploy(&kubectl);
    // The namespace is Velero's: declaring it would make `kubectl delete -k deploy/` delete
    // Velero with it.
    assert!(
        docs.iter().all(|d| d["kind"] != "Namespace"),
        "deploy/ declares a Namespace"
    );
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("no Deployment in deploy/"));
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(deployment["spec"]["replicas"], json!(2));
    assert_eq!(container["image"], json!("bsl-sentinel:0.1.0"));
    assert_eq!(container["args"], json!(["serve"]));
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"],
        json!("/livez")
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"],
        json!("/readyz")
    );
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], json!(true));
    assert_eq!(security["allowPrivilegeEscalation"], json!(false));
    assert_eq!(security["runAsNonRoot"], json!(true));
    assert_eq!(security["runAsUser"], json!(65532));
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(security["seccompProfile"]["type"], json!("RuntimeDefault"));
    let mount = container["volumeMounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["mountPath"] == "/etc/bsl-sentinel/tls"))
        .unwrap_or_else(|| panic!("the TLS Secret is not mounted at /etc/bsl-sentinel/tls"));
    assert!(
        mount.get("subPath").is_none(),
        "subPath would stop rotation"
    );
    let volume = pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == mount["name"]))
        .unwrap_or_else(|| panic!("no volume {}", mount["name"]));
    assert_eq!(
        volume["secret"]["secretName"],
        json!("bsl-sentinel-webhook-tls")
    );
}

/// `kubectl auth can-i` as the ServiceAccount: Ok(true) for "yes".
fn can_i(kubectl: &Kubectl, args: &[&str]) -> bool {
    let as_sa = format!("--as={SA}");
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    all.push(&as_sa);
    let out = kubectl.run(&all);
    match out.stdout.trim() {
        "yes" => true,
        "no" => false,
        other => panic!("kubectl {all:?}: {other:?} {}", out.stderr),
    }
}

#[test]
fn rbac_grants_exactly_what_the_code_needs() {
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    let _velero = velero_lock();
    ensure_namespace(&kubectl, "velero");
    // Only the ServiceAccount and the RBAC objects, for real.
    let objects: Vec<Value> = rendered_deploy(&kubectl)
        .into_iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some(
                    "ServiceAccount"
                        | "Role"
                        | "RoleBinding"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                )
            )
        })
        .collect();
    assert_eq!(objects.len(), 5, "{objects:?}");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let out = kubectl.run_with_stdin(&["apply", "-f", "-"], &list.to_string());
    assert!(out.success, "{}", out.stderr);

    let allowed: &[&[&str]] = &[
        &["get", "backupstoragelocations.velero.io", "-n", "velero"],
        &["list", "backupstoragelocations.velero.io", "-n", "velero"],
        &["watch", "backupstoragelocations.velero.io", "-n", "velero"],
        &["patch", "backupstoragelocations.velero.io", "-n", "velero"],
        &[
            "patch",
            "backupstoragelocations.velero.io",
            "--subresource=status",
            "-n",
            "velero",
        ],
        &["get", "secrets", "-n", "velero"],
        &["list", "secrets", "-n", "velero"],
        &["watch", "secrets", "-n", "velero"],
        &["create", "events.events.k8s.io", "-n", "velero"],
        &["create", "leases.coordination.k8s.io", "-n", "velero"],
        &[
            "get",
            "leases.coordination.k8s.io/bsl-sentinel",
            "-n",
            "velero",
        ],
        &[
            "update",
            "leases.coordination.k8s.io/bsl-sentinel",
            "-n",
            "velero",
        ],
        &[
            "list",
            "leases.coordination.k8s.io/bsl-sentinel",
            "-n",
            "velero",
        ],
        &[
            "watch",
            "leases.coordination.k8s.io/bsl-sentinel",
            "-n",
            "velero",
        ],
        &["create", "configmaps", "-n", "velero"],
        &["get", "configmaps/bsl-sentinel-status", "-n", "velero"],
        &["patch", "configmaps/bsl-sentinel-status", "-n", "velero"],
        &["update", "configmaps/bsl-sentinel-status", "-n", "velero"],
        &[
            "get",
            "customresourcedefinitions.apiextensions.k8s.io/backupstoragelocations.velero.io",
        ],
    ];
    let denied: &[&[&str]] = &[
        &["get", "secrets", "-n", "default"],
        &["list", "secrets", "--all-namespaces"],
        &["delete", "backupstoragelocations.velero.io", "-n", "velero"],
        &["create", "backupstoragelocations.velero.io", "-n", "velero"],
        &["update", "backupstoragelocations.velero.io", "-n", "velero"],
        &["list", "backupstoragelocations.velero.io", "-n", "default"],
        &[
            "get",
            "customresourcedefinitions.apiextensions.k8s.io/certificates.cert-manager.io",
        ],
        &["list", "customresourcedefinitions.apiextensions.k8s.io"],
        &[
            "update",
            "customresourcedefinitions.apiextensions.k8s.io/backupstoragelocations.velero.io",
        ],
        &["delete", "secrets", "-n", "velero"],
        &["create", "secrets", "-n", "velero"],
        &["update", "leases.coordination.k8s.io/other", "-n", "velero"],
        &["list", "leases.coordination.k8s.io", "-n", "velero"],
        &[
            "delete",
            "leases.coordination.k8s.io/bsl-sentinel",
            "-n",
            "velero",
        ],
        &["get", "configmaps/other", "-n", "velero"],
        &["delete", "configmaps/bsl-sentinel-status", "-n", "velero"],
        &["create", "pods", "-n", "velero"],
        &["create", "events.events.k8s.io", "-n", "default"],
    ];
    let mut wrong = Vec::new();
    for args in allowed {
        if !can_i(&kubectl, args) {
            wrong.push(format!("denied but needed: {args:?}"));
        }
    }
    for args in denied {
        if can_i(&kubectl, args) {
            wrong.push(format!("allowed but not needed: {args:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // No delete anywhere: the full list of the ServiceAccount's rules in velero.
    let as_sa = format!("--as={SA}");
    let out = kubectl.ok(&["auth", "can-i", "--list", "-n", "velero", &as_sa]);
    for line in out.stdout.lines().skip(1) {
        assert!(
            !line.contains("delete") && !line.contains("[*]"),
            "unexpected rule: {line}"
        );
    }

    // The status ConfigMap is published with server-side apply; that the rules allow it (a
    // first apply creates it) is shown by doing it as the ServiceAccount.
    let configmap = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bsl-sentinel-status", "namespace": "velero"},
        "data": {"status.json": "{}"}
    });
    for _ in 0..2 {
        let out = kubectl.run_with_stdin(
            &[
                "apply",
                "--server-side",
                "--field-manager=bsl-sentinel",
                "--force-conflicts",
                &as_sa,
                "-f",
                "-",
            ],
            &configmap.to_string(),
        );
        assert!(out.success, "server-side apply as {SA}: {}", out.stderr);
    }
    kubectl.ok(&[
        "delete",
        "configmap",
        "bsl-sentinel-status",
        "-n",
        "velero",
        "--ignore-not-found",
    ]);
}

// ---- certs/make-certs.sh -----------------------------------------------------------------

#[test]
fn make_certs_writes_the_secret_and_renders_a_verifying_ca_bundle() {
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("deploy-certs");
    let out_dir = plane.dir.join(format!("certs-{ns}"));
    let run = || {
        let out = Command::new("bash")
            .arg(repo_root().join("certs/make-certs.sh"))
            .arg(&ns)
            .arg(&out_dir)
            .env("KUBECONFIG", &plane.kubeconfig)
            .env("KUBECTL", plane.bin.join("kubectl"))
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("make-certs.sh: {e}"));
        assert!(out.status.success(), "make-certs.sh failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let rendered = run();

    let secret = secret_data(&kubectl, &ns, "bsl-sentinel-webhook-tls")
        .unwrap_or_else(|| panic!("no Secret bsl-sentinel-webhook-tls in {ns}"));
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(
            secret.get(key).is_some_and(|v| !v.is_empty()),
            "{key} missing"
        );
    }
    let secret_json = kubectl.ok(&[
        "get",
        "secret",
        "bsl-sentinel-webhook-tls",
        "-n",
        &ns,
        "-o",
        "json",
    ]);
    assert!(
        secret_json
            .stdout
            .contains("\"type\": \"kubernetes.io/tls\"")
    );

    let bundles = |text: &str| -> Vec<Value> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text)
            .unwrap_or_else(|e| panic!("make-certs.sh printed no YAML: {e}\n{text}"));
        let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
        let mut kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration"
            ]
        );
        docs.iter()
            .flat_map(|d| d["webhooks"].as_array().cloned().unwrap_or_default())
            .map(|w| w["clientConfig"].clone())
            .collect()
    };
    let configs = bundles(&rendered);
    assert_eq!(configs.len(), 2);
    let tls_crt = out_dir.join("secret-tls.crt");
    write(&tls_crt, &secret["tls.crt"]);
    for config in &configs {
        assert_eq!(config["service"]["namespace"], json!(ns));
        assert_eq!(config["service"]["name"], json!("bsl-sentinel-webhook"));
        let ca = b64()
            .decode(config["caBundle"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("caBundle is not base64: {e}"));
        assert_eq!(ca, secret["ca.crt"], "caBundle is the Secret's ca.crt");
        let ca_file = out_dir.join("bundle-ca.crt");
        write(&ca_file, &ca);
        let (ok, text) = openssl_verify(&ca_file, &tls_crt);
        assert!(
            ok,
            "the serving certificate does not verify against caBundle: {text}"
        );
    }
    // The apiserver accepts the rendered configurations (dry run: they would call a Service
    // in this namespace, which cannot be routed here).
    let out = kubectl.run_with_stdin(&["apply", "--dry-run=server", "-f", "-"], &rendered);
    assert!(out.success, "{}", out.stderr);

    // Running it again renews the serving certificate under the same CA.
    let again = run();
    let renewed = secret_data(&kubectl, &ns, "bsl-sentinel-webhook-tls").unwrap_or_default();
    assert_ne!(
        renewed["tls.crt"], secret["tls.crt"],
        "a new serving certificate"
    );
    assert_eq!(renewed["ca.crt"], secret["ca.crt"], "the same CA");
    assert_eq!(bundles(&again), configs, "caBundle unchanged");
}
