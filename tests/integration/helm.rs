//! The Helm chart charts/bsl-sentinel with the real Helm (tests/peers/build-helm.sh): lint,
//! `helm template` against `kubectl kustomize deploy/` (compared as objects), and install,
//! upgrade and uninstall against a real kube-apiserver of the test's own (the chart's
//! cluster-scoped objects have fixed names, so they never share an apiserver with deploy.rs).
//!
//! Helm's own files go to a folder of the test's (HELM_*_HOME), never the user's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::support::control_plane::Restartable;
use crate::support::{Crd, Kubectl, Output, eventually, repo_root, run_script};

/// The folder tests/peers/build-helm.sh built helm into (once per test binary).
fn helm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| PathBuf::from(run_script("tests/peers/build-helm.sh")).join("helm"))
}

/// kubectl of the control plane's release, for `kubectl kustomize` (no apiserver needed).
fn kubectl_bin() -> PathBuf {
    let dir = match std::env::var_os("BSL_SENTINEL_KUBE_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(run_script("tests/peers/build-kube.sh")),
    };
    dir.join("kubectl")
}

/// The real helm with its homes in `home` and, for the install tests, a kubeconfig.
struct Helm {
    home: PathBuf,
    kubeconfig: Option<PathBuf>,
}

impl Helm {
    fn offline(home: &Path) -> Helm {
        Helm {
            home: home.to_path_buf(),
            kubeconfig: None,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(helm_bin());
        for var in ["HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"] {
            cmd.env(var, &self.home);
        }
        match &self.kubeconfig {
            Some(k) => cmd.env("KUBECONFIG", k),
            None => cmd.env("KUBECONFIG", self.home.join("no-kubeconfig")),
        };
        let out = cmd
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("helm {args:?}: {e}"));
        Output {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn ok(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(
            out.success,
            "helm {args:?} failed:\n{}{}",
            out.stdout, out.stderr
        );
        out
    }

    /// `helm template bsl-sentinel charts/bsl-sentinel -n NS ARGS...` as objects.
    fn template(&self, namespace: &str, args: &[&str]) -> Vec<Value> {
        let chart = chart();
        let mut all = vec!["template", "bsl-sentinel", &chart, "-n", namespace];
        all.extend_from_slice(args);
        parse(&self.ok(&all).stdout, "helm template")
    }
}

fn chart() -> String {
    repo_root()
        .join("charts/bsl-sentinel")
        .display()
        .to_string()
}

fn parse(text: &str, what: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)
        .unwrap_or_else(|e| panic!("{what} is not YAML: {e}\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// (kind, namespace, name) of an object, the key both renders are compared by.
fn key(o: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&o["kind"]),
        s(&o["metadata"]["namespace"]),
        s(&o["metadata"]["name"]),
    )
}

fn by_key(objects: Vec<Value>) -> std::collections::BTreeMap<(String, String, String), Value> {
    let mut map = std::collections::BTreeMap::new();
    for o in objects {
        let k = key(&o);
        assert!(map.insert(k.clone(), o).is_none(), "{k:?} rendered twice");
    }
    map
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn args(deployment: &Value) -> Vec<String> {
    container(deployment)["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

#[test]
fn helm_lint_passes_strict_for_the_defaults_and_the_other_modes() {
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let helm = Helm::offline(home.path());
    let chart = chart();
    for set in [
        "",
        "certManager.enabled=false",
        "certManager.enabled=false,tls.existingSecret=mine,tls.caBundle=PEM",
        "reconciler=false,replicas=1,crd.install=true",
    ] {
        let mut args = vec!["lint", "--strict", &chart];
        if !set.is_empty() {
            args.extend(["--set", set]);
        }
        let out = helm.ok(&args);
        assert!(
            out.stdout.contains("1 chart(s) linted, 0 chart(s) failed"),
            "helm lint --set {set}: {}",
            out.stdout
        );
    }
}

#[test]
fn helm_template_with_default_values_renders_the_objects_of_kubectl_kustomize_deploy() {
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let helm = Helm::offline(home.path());
    let rendered = by_key(helm.template("velero", &[]));
    let kubectl = Kubectl::new(&kubectl_bin(), &home.path().join("no-kubeconfig"));
    let dir = repo_root().join("deploy").display().to_string();
    let deploy = by_key(parse(
        &kubectl.ok(&["kustomize", &dir]).stdout,
        "kubectl kustomize deploy/",
    ));
    let only_helm: Vec<_> = rendered
        .keys()
        .filter(|k| !deploy.contains_key(k))
        .collect();
    let only_deploy: Vec<_> = deploy
        .keys()
        .filter(|k| !rendered.contains_key(k))
        .collect();
    assert!(
        only_helm.is_empty() && only_deploy.is_empty(),
        "only in helm template: {only_helm:?}; only in deploy/: {only_deploy:?}"
    );
    for (k, object) in &deploy {
        assert_eq!(
            &rendered[k], object,
            "{k:?} differs (left: helm template, right: kubectl kustomize deploy/)"
        );
    }
    // No Namespace, ever: it is Velero's.
    assert!(!rendered.keys().any(|k| k.0 == "Namespace"));
}

#[test]
fn helm_values_change_namespace_mode_args_node_selection_and_crd() {
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let helm = Helm::offline(home.path());

    // Another namespace (the value, over the release's), webhook-only, extra args, one
    // replica, node selection, resources, the CRD.
    let objects = helm.template(
        "default",
        &[
            "--set",
            "namespace=backup,reconciler=false,replicas=1,crd.install=true",
            "--set",
            "image.repository=registry.example/bsl-sentinel,image.tag=9.9.9",
            "--set",
            "nodeSelector.disktype=ssd,resources.requests.cpu=10m",
            "--set-json",
            r#"extraArgs=["--validation-frequency=30s"]"#,
            "--set-json",
            r#"tolerations=[{"key":"backup","operator":"Exists"}]"#,
            "--set-json",
            r#"extraEnv=[{"name":"HTTPS_PROXY","value":"http://proxy:3128"}]"#,
        ],
    );
    for o in &objects {
        let k = key(o);
        let cluster_scoped = matches!(
            k.0.as_str(),
            "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "CustomResourceDefinition"
        );
        assert_eq!(k.1.is_empty(), cluster_scoped, "{k:?}: namespace");
        if !cluster_scoped {
            assert_eq!(k.1, "backup", "{k:?}");
        }
        assert_ne!(k.0, "Namespace");
    }
    let deployment = find(&objects, "Deployment", "bsl-sentinel").expect("the Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(
        args(deployment),
        ["serve", "--reconciler=false", "--validation-frequency=30s"]
    );
    assert_eq!(
        container(deployment)["image"],
        "registry.example/bsl-sentinel:9.9.9"
    );
    assert_eq!(container(deployment)["resources"]["requests"]["cpu"], "10m");
    let env = container(deployment)["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        env.len(),
        3,
        "POD_NAMESPACE, POD_NAME, then extraEnv: {env:?}"
    );
    assert_eq!(
        env[2],
        json!({"name": "HTTPS_PROXY", "value": "http://proxy:3128"})
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"disktype": "ssd"}));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "backup", "operator": "Exists"}])
    );
    // One replica: no PodDisruptionBudget, which would block every drain.
    assert!(find(&objects, "PodDisruptionBudget", "bsl-sentinel").is_none());
    // The webhooks call the Service in that namespace; cert-manager names it too.
    let webhook = find(&objects, "ValidatingWebhookConfiguration", "bsl-sentinel").expect("vwc");
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["service"]["namespace"],
        "backup"
    );
    assert_eq!(
        webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "backup/bsl-sentinel-webhook"
    );
    let cert = find(&objects, "Certificate", "bsl-sentinel-webhook").expect("Certificate");
    assert_eq!(
        cert["spec"]["dnsNames"],
        json!([
            "bsl-sentinel-webhook.backup.svc",
            "bsl-sentinel-webhook.backup.svc.cluster.local"
        ])
    );
    // The CRD is deploy/crd/'s, kept on uninstall (deleting it would delete every BSL).
    let mut crd = find(
        &objects,
        "CustomResourceDefinition",
        "backupstoragelocations.velero.io",
    )
    .expect("the CRD")
    .clone();
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    if let Some(meta) = crd["metadata"].as_object_mut() {
        meta.remove("annotations");
    }
    let file = repo_root().join("deploy/crd/backupstoragelocations.velero.io.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    assert_eq!(
        crd,
        parse(&text, "deploy/crd")[0],
        "the chart's CRD drifted"
    );

    // Defaults: no CRD, the reconciler on.
    let defaults = helm.template("velero", &[]);
    assert!(
        find(
            &defaults,
            "CustomResourceDefinition",
            "backupstoragelocations.velero.io"
        )
        .is_none()
    );
    let deployment = find(&defaults, "Deployment", "bsl-sentinel").expect("the Deployment");
    assert_eq!(args(deployment), ["serve"]);

    // An existing Secret without its CA is refused with a message naming the value.
    let chart = chart();
    let out = helm.run(&[
        "template",
        "x",
        &chart,
        "--set",
        "certManager.enabled=false,tls.existingSecret=mine",
    ]);
    assert!(
        !out.success && out.stderr.contains("tls.caBundle"),
        "{}",
        out.stderr
    );
    // With it: the pods mount that Secret, the webhooks carry that CA, no Secret is made.
    let objects = helm.template(
        "velero",
        &[
            "--set",
            "certManager.enabled=false,tls.existingSecret=mine,tls.caBundle=CA-PEM",
        ],
    );
    let deployment = find(&objects, "Deployment", "bsl-sentinel").expect("the Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "mine"
    );
    let webhook = find(&objects, "MutatingWebhookConfiguration", "bsl-sentinel").expect("mwc");
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["caBundle"],
        base64::engine::general_purpose::STANDARD.encode("CA-PEM")
    );
    assert!(webhook["metadata"]["annotations"].is_null());
    assert!(!objects.iter().any(|o| o["kind"] == "Secret"));
    assert!(!objects.iter().any(|o| o["kind"] == "Certificate"));
}

fn get_json(kubectl: &Kubectl, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend(["-o", "json"]);
    let out = kubectl.run(&all);
    out.success
        .then(|| serde_json::from_str(&out.stdout).unwrap_or_default())
}

fn secret_file(dir: &Path, secret: &Value, key: &str) -> PathBuf {
    let b64 = secret["data"][key].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap_or_else(|e| panic!("{key}: {e}"));
    let path = dir.join(key);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    path
}

/// `openssl verify` of the serving certificate `crt` against a webhook's caBundle (base64), for
/// the Service's name, as the apiserver checks it.
fn verifies_for_the_service(dir: &Path, ca_bundle: &str, crt: &Path) -> Result<(), String> {
    let ca = dir.join("ca-bundle.pem");
    let ca_pem = base64::engine::general_purpose::STANDARD
        .decode(ca_bundle)
        .map_err(|e| format!("caBundle: {e}"))?;
    std::fs::write(&ca, ca_pem).map_err(|e| format!("{ca:?}: {e}"))?;
    let out = Command::new("openssl")
        .args([
            "verify",
            "-verify_hostname",
            "bsl-sentinel-webhook.velero.svc",
            "-CAfile",
        ])
        .arg(&ca)
        .arg(crt)
        .output()
        .map_err(|e| format!("openssl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The chart's objects, as (kind, namespace, name) for `kubectl get`.
const CHART_OBJECTS: &[(&str, &str)] = &[
    ("serviceaccount", "bsl-sentinel"),
    ("role.rbac.authorization.k8s.io", "bsl-sentinel"),
    ("rolebinding.rbac.authorization.k8s.io", "bsl-sentinel"),
    ("deployment.apps", "bsl-sentinel"),
    ("service", "bsl-sentinel-webhook"),
    ("poddisruptionbudget.policy", "bsl-sentinel"),
    ("secret", "bsl-sentinel-webhook-tls"),
];
const CHART_CLUSTER_OBJECTS: &[(&str, &str)] = &[
    ("clusterrole.rbac.authorization.k8s.io", "bsl-sentinel"),
    (
        "clusterrolebinding.rbac.authorization.k8s.io",
        "bsl-sentinel",
    ),
    (
        "validatingwebhookconfiguration.admissionregistration.k8s.io",
        "bsl-sentinel",
    ),
    (
        "mutatingwebhookconfiguration.admissionregistration.k8s.io",
        "bsl-sentinel",
    ),
];

#[test]
fn helm_install_upgrade_and_uninstall_keep_velero_namespace_and_bsls() {
    let own = Restartable::start(Crd::Project);
    let plane = &own.plane;
    let kubectl = plane.kubectl();
    let helm = Helm {
        home: plane.dir.join("helm-home"),
        kubeconfig: Some(plane.kubeconfig.clone()),
    };
    std::fs::create_dir_all(&helm.home).unwrap_or_else(|e| panic!("helm home: {e}"));
    let chart = chart();

    // Velero's namespace and a BSL with a status, there before bsl-sentinel.
    kubectl.ok(&["create", "namespace", "velero"]);
    let bsl = json!({
        "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
        "metadata": {"name": "primary", "namespace": "velero"},
        "spec": {"provider": "aws", "default": true,
                 "objectStorage": {"bucket": "backups"}, "config": {"region": "eu-west-1"}},
        "status": {"phase": "Available", "lastValidationTime": "2026-12-03T10:00:00Z"}
    });
    let out = kubectl.apply("velero", &bsl.to_string());
    assert!(out.success, "{}", out.stderr);
    let bsl_before = get_json(&kubectl, &["bsl", "primary", "-n", "velero"]).expect("the BSL");

    // Install: no cert-manager on this apiserver, so the chart makes the certificate.
    helm.ok(&[
        "install",
        "bsl-sentinel",
        &chart,
        "-n",
        "velero",
        "--set",
        "certManager.enabled=false",
    ]);
    for (kind, name) in CHART_OBJECTS {
        assert!(
            get_json(&kubectl, &[kind, name, "-n", "velero"]).is_some(),
            "{kind}/{name} missing after helm install"
        );
    }
    for (kind, name) in CHART_CLUSTER_OBJECTS {
        assert!(
            get_json(&kubectl, &[kind, name]).is_some(),
            "{kind}/{name} missing after helm install"
        );
    }
    let deployment =
        get_json(&kubectl, &["deployment", "bsl-sentinel", "-n", "velero"]).expect("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(args(&deployment), ["serve"]);
    // The namespace is not the release's: Helm did not adopt it.
    let ns = get_json(&kubectl, &["namespace", "velero"]).expect("namespace");
    assert!(
        ns["metadata"]["annotations"]["meta.helm.sh/release-name"].is_null(),
        "{ns}"
    );
    let manifest = helm
        .ok(&["get", "manifest", "bsl-sentinel", "-n", "velero"])
        .stdout;
    assert!(!manifest.contains("kind: Namespace"), "{manifest}");

    // The certificate the chart made verifies against the webhooks' caBundle, for the
    // Service's names.
    let secret = get_json(
        &kubectl,
        &["secret", "bsl-sentinel-webhook-tls", "-n", "velero"],
    )
    .expect("the TLS Secret");
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let crt = secret_file(tmp.path(), &secret, "tls.crt");
    let vwc = get_json(
        &kubectl,
        &["validatingwebhookconfiguration", "bsl-sentinel"],
    )
    .expect("vwc");
    let ca_bundle = vwc["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Err(e) = verifies_for_the_service(tmp.path(), &ca_bundle, &crt) {
        panic!("the chart's certificate does not verify against caBundle: {e}");
    }

    // Upgrade: more replicas, webhook-only, an extra flag; the certificate stays.
    helm.ok(&[
        "upgrade",
        "bsl-sentinel",
        &chart,
        "-n",
        "velero",
        "--set",
        "certManager.enabled=false,replicas=3,reconciler=false",
        "--set-json",
        r#"extraArgs=["--validation-frequency=30s"]"#,
    ]);
    let deployment =
        get_json(&kubectl, &["deployment", "bsl-sentinel", "-n", "velero"]).expect("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        args(&deployment),
        ["serve", "--reconciler=false", "--validation-frequency=30s"]
    );
    let secret_after = get_json(
        &kubectl,
        &["secret", "bsl-sentinel-webhook-tls", "-n", "velero"],
    )
    .expect("the TLS Secret");
    assert_eq!(
        secret_after["data"], secret["data"],
        "helm upgrade replaced the certificate"
    );
    let vwc = get_json(
        &kubectl,
        &["validatingwebhookconfiguration", "bsl-sentinel"],
    )
    .expect("vwc");
    assert_eq!(
        vwc["webhooks"][0]["clientConfig"]["caBundle"], ca_bundle,
        "helm upgrade changed caBundle"
    );
    let history = helm.ok(&["history", "bsl-sentinel", "-n", "velero"]).stdout;
    assert!(history.contains("Upgrade complete"), "{history}");

    // Uninstall: every object of the chart goes; the namespace, the BSL and its status stay.
    helm.ok(&["uninstall", "bsl-sentinel", "-n", "velero", "--wait"]);
    for (kind, name) in CHART_OBJECTS {
        assert!(
            get_json(&kubectl, &[kind, name, "-n", "velero"]).is_none(),
            "{kind}/{name} left after helm uninstall"
        );
    }
    for (kind, name) in CHART_CLUSTER_OBJECTS {
        assert!(
            get_json(&kubectl, &[kind, name]).is_none(),
            "{kind}/{name} left after helm uninstall"
        );
    }
    let ns = get_json(&kubectl, &["namespace", "velero"]).expect("namespace velero is gone");
    assert_eq!(ns["status"]["phase"], "Active");
    assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");
    let bsl_after =
        get_json(&kubectl, &["bsl", "primary", "-n", "velero"]).expect("the BSL is gone");
    assert_eq!(bsl_after["spec"], bsl_before["spec"]);
    assert_eq!(bsl_after["status"], bsl_before["status"]);
    assert_eq!(bsl_after["status"]["phase"], "Available");
}

/// Children killed when the test ends, also when it fails (the peers of an apiserver of the
/// test's own must not outlive it).
struct Killed(Vec<std::process::Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_with_default_values_gets_its_certificate_and_ca_bundle_from_cert_manager() {
    let own = Restartable::start(Crd::Project);
    let plane = &own.plane;
    let kubectl = plane.kubectl();
    crate::deploy::apply_cert_manager_crds(plane);
    let _cert_manager = Killed(crate::deploy::spawn_cert_manager(plane, "helm-"));

    kubectl.ok(&["create", "namespace", "velero"]);
    let helm = Helm {
        home: plane.dir.join("helm-home"),
        kubeconfig: Some(plane.kubeconfig.clone()),
    };
    std::fs::create_dir_all(&helm.home).unwrap_or_else(|e| panic!("helm home: {e}"));
    let chart = chart();
    helm.ok(&["install", "bsl-sentinel", &chart, "-n", "velero"]);

    // cert-manager issues the serving certificate from the chart's CA, and cainjector puts that
    // CA in both webhook configurations.
    let (secret, bundle) = eventually(
        "cert-manager's Secret and cainjector's caBundle",
        Duration::from_secs(90),
        || async {
            let secret = get_json(
                &kubectl,
                &["secret", "bsl-sentinel-webhook-tls", "-n", "velero"],
            )
            .ok_or("no Secret bsl-sentinel-webhook-tls yet")?;
            let ca = secret["data"]["ca.crt"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if ca.is_empty() || secret["data"]["tls.crt"].as_str().is_none() {
                return Err("the Secret has no ca.crt or tls.crt yet");
            }
            for kind in [
                "validatingwebhookconfiguration",
                "mutatingwebhookconfiguration",
            ] {
                let config =
                    get_json(&kubectl, &[kind, "bsl-sentinel"]).ok_or("no webhook config")?;
                if config["webhooks"][0]["clientConfig"]["caBundle"] != json!(ca) {
                    return Err("caBundle not injected yet");
                }
            }
            Ok((secret, ca))
        },
    )
    .await;
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let crt = secret_file(tmp.path(), &secret, "tls.crt");
    if let Err(e) = verifies_for_the_service(tmp.path(), &bundle, &crt) {
        panic!("cert-manager's certificate does not verify against caBundle: {e}");
    }

    // Uninstall takes the Issuers and Certificates; cert-manager's Secrets stay, with the label
    // the README's clean-up command selects.
    helm.ok(&["uninstall", "bsl-sentinel", "-n", "velero", "--wait"]);
    for kind in ["certificates.cert-manager.io", "issuers.cert-manager.io"] {
        let out = kubectl.ok(&["get", kind, "-n", "velero", "-o", "name"]);
        assert!(
            out.stdout.trim().is_empty(),
            "left after uninstall: {}",
            out.stdout
        );
    }
    let out = kubectl.ok(&[
        "get",
        "secret",
        "-n",
        "velero",
        "-l",
        "app.kubernetes.io/name=bsl-sentinel",
        "-o",
        "name",
    ]);
    let mut left: Vec<&str> = out.stdout.lines().collect();
    left.sort();
    assert_eq!(
        left,
        ["secret/bsl-sentinel-ca", "secret/bsl-sentinel-webhook-tls"]
    );
    let ns = get_json(&kubectl, &["namespace", "velero"]).expect("namespace velero is gone");
    assert_eq!(ns["status"]["phase"], "Active");
}

#[test]
fn helm_refuses_a_misspelt_or_invalid_value_by_the_chart_schema() {
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let helm = Helm::offline(home.path());
    let chart = chart();
    for (set, says) in [
        (
            "reconcilr=false",
            "additional properties 'reconcilr' not allowed",
        ),
        ("replicas=0", "/replicas"),
        ("certManager.enable=false", "'enable' not allowed"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ] {
        let out = helm.run(&["template", "bsl-sentinel", &chart, "--set", set]);
        assert!(!out.success, "--set {set} was accepted");
        assert!(out.stderr.contains(says), "--set {set}: {}", out.stderr);
    }
}
