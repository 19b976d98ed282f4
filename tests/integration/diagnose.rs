//! `bsl-sentinel diagnose` against the real peers: one test per broken step, a healthy
//! location per provider, and for each the reconciler's own check of the same location, which
//! must agree (diagnose exits 0 exactly when the check finds the location Available). No
//! output ever holds a secret.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use bsl_sentinel::diagnose::run::{self, Input, Secrets};
use bsl_sentinel::proxy::Proxies;
use bsl_sentinel::storage::{Outcome, Probe};
use k8s_openapi::ByteString;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

use crate::support::faults::{Faulty, Unconnectable};
use crate::support::forward_proxy::ForwardProxy;
use crate::support::pki::{Ca, Pem};
use crate::support::storage::{
    Azurite, FakeGcs, Location, Moto, SeaweedFs, credentials_ini, free_ports, test_ca_pem,
};
use crate::support::{ControlPlane, Crd};

const TIMEOUT: &str = "2s";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    json: Value,
}

impl Run {
    /// The step that did not pass, by name ("tls"), or "none".
    fn stopped_at(&self) -> String {
        self.json["steps"]
            .as_array()
            .and_then(|steps| steps.iter().find(|s| s["verdict"] != "ok"))
            .and_then(|s| s["step"].as_str())
            .unwrap_or("none")
            .to_string()
    }

    fn step(&self, name: &str) -> &Value {
        self.json["steps"]
            .as_array()
            .and_then(|steps| steps.iter().find(|s| s["step"] == name))
            .unwrap_or(&Value::Null)
    }

    fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

async fn bsl_sentinel(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_bsl-sentinel"));
    command.arg("diagnose").args(args);
    for var in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    let out = command
        .output()
        .await
        .unwrap_or_else(|e| panic!("bsl-sentinel: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    Run {
        code: out.status.code(),
        json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A location offline: its manifest and credentials in files, diagnosed with -o json.
struct Offline {
    dir: tempfile::TempDir,
}

impl Offline {
    fn new() -> Offline {
        Offline {
            dir: tempfile::tempdir().unwrap_or_else(|e| panic!("{e}")),
        }
    }

    fn write(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
        path.display().to_string()
    }

    async fn diagnose(&self, location: &Location, extra: &[&str], env: &[(&str, &str)]) -> Run {
        let manifest = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
            "metadata": {"name": "diag"}, "spec": location.spec});
        let file = self.write("bsl.yaml", manifest.to_string().as_bytes());
        let credentials = self.write("cloud", &location.credential);
        let mut args = vec![
            "-f",
            &file,
            "--credentials-file",
            &credentials,
            "--check-timeout",
            TIMEOUT,
            "-o",
            "json",
        ];
        args.extend(extra);
        bsl_sentinel(&args, env).await
    }
}

/// The reconciler's check of the same location.
async fn reconciler_check(location: &Location, proxies: Proxies) -> Outcome {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Probe::new(4, Duration::from_secs(2))
        .with_proxies(proxies)
        .check(&location.spec, Some(&location.credential), None)
        .await
}

/// Diagnose stops at `step` (or passes, with "none"), the reconciler agrees, and neither the
/// secret key nor any other `secrets` shows.
async fn assert_diagnosis(run: &Run, location: &Location, step: &str, secrets: &[&str]) {
    assert_eq!(run.stopped_at(), step, "{}", run.text());
    let expected = if step == "none" { 0 } else { 1 };
    assert_eq!(run.code, Some(expected), "{}", run.text());
    let outcome = reconciler_check(location, Proxies::default()).await;
    assert_eq!(
        outcome == Outcome::Available,
        step == "none",
        "the reconciler's check disagrees: {outcome:?}\n{}",
        run.text()
    );
    assert_no_secrets(&run.text(), secrets);
}

fn assert_no_secrets(text: &str, secrets: &[&str]) {
    let s3 = SeaweedFs::shared();
    for secret in secrets.iter().chain([&s3.secret_key.as_str()]) {
        assert!(!text.contains(secret), "a secret shows: {text}");
    }
}

/// A TLS server on 127.0.0.1 presenting `pem`; it completes handshakes and nothing more.
async fn tls_server(pem: &Pem) -> u16 {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.cert.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}"));
    let key = PrivateKeyDer::from_pem_slice(pem.key.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let config = rustls::ServerConfig::builder_with_provider(bsl_sentinel::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| panic!("{e}"))
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap_or_else(|e| panic!("{e}"));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(tcp).await;
            });
        }
    });
    port
}

const LOCALHOST: [IpAddr; 1] = [IpAddr::V4(Ipv4Addr::LOCALHOST)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_seaweedfs_location_passes_every_step() {
    let s3 = SeaweedFs::shared();
    s3.seed("diag-ok", &["velero/backups/b1/velero-backup.json"])
        .await;
    let location = s3.location("diag-ok", Some("velero"));
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "none", &[]).await;
    assert_eq!(run.json["available"], true);
    let layout = run.step("layout")["details"].to_string();
    assert!(layout.contains("backups"), "{layout}");
    // The readable table says the same.
    let table = Offline::new();
    let manifest = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "diag"}, "spec": location.spec});
    let (file, cred) = (
        table.write("b.yaml", manifest.to_string().as_bytes()),
        table.write("c", &location.credential),
    );
    let run = bsl_sentinel(&["-f", &file, "--credentials-file", &cred], &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.text());
    assert!(
        run.stdout.contains("result: available, every step passed"),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_spec_fails_the_spec_step_with_every_field_error() {
    let s3 = SeaweedFs::shared();
    let mut location = s3.location("diag-bad/spec", None);
    location.spec.provider = String::new();
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "spec", &[]).await;
    let details = run.step("spec")["details"].to_string();
    assert!(
        details.contains("spec.provider: Required value"),
        "{details}"
    );
    assert!(
        details.contains("spec.objectStorage.bucket: Invalid value"),
        "{details}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_fails_authentication() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("diag-auth").await;
    let mut location = s3.location("diag-auth", None);
    location.credential =
        credentials_ini(&s3.access_key, "wrong-secret-key-0123456789").into_bytes();
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(
        &run,
        &location,
        "authentication",
        &["wrong-secret-key-0123456789"],
    )
    .await;
    assert!(
        run.step("authentication")["fix"]
            .to_string()
            .contains("secret key does not match"),
        "{}",
        run.text()
    );
}

/// Resolving a name would send a query to this machine's DNS server, off 127.0.0.1: the
/// binary runs in a network namespace of its own (`unshare --net`: only a down loopback, no
/// route), where no query leaves and every name fails to resolve. The reconciler's own check
/// is not compared here: in this process a lookup would leave the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_host_fails_dns() {
    let s3 = SeaweedFs::shared();
    let location = s3.location_via(
        "http://bsl-sentinel-diagnose.invalid:8333",
        "diag-dns",
        None,
    );
    let offline = Offline::new();
    let manifest = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
        "metadata": {"name": "diag"}, "spec": location.spec});
    let file = offline.write("bsl.yaml", manifest.to_string().as_bytes());
    let credentials = offline.write("cloud", &location.credential);
    let out = tokio::process::Command::new("unshare")
        .args(["--net", "--"])
        .arg(env!("CARGO_BIN_EXE_bsl-sentinel"))
        .args(["diagnose", "-f", &file, "--credentials-file", &credentials])
        .args(["--check-timeout", TIMEOUT, "-o", "json"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("unshare: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let run = Run {
        code: out.status.code(),
        json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(run.code, Some(1), "{}", run.text());
    assert_eq!(run.stopped_at(), "dns", "{}", run.text());
    assert!(
        run.step("dns")["fix"]
            .to_string()
            .contains("correct the host in config.s3Url"),
        "{}",
        run.text()
    );
    assert!(!run.text().contains(&s3.secret_key), "{}", run.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_fails_tcp_as_refused() {
    let s3 = SeaweedFs::shared();
    let port = free_ports(1)[0];
    let location = s3.location_via(&format!("http://127.0.0.1:{port}"), "diag-closed", None);
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "tcp", &[]).await;
    let details = run.step("tcp")["details"].to_string();
    assert!(details.contains("connection refused"), "{details}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_port_fails_tcp_as_timed_out() {
    let s3 = SeaweedFs::shared();
    let silent = Unconnectable::start();
    let location = s3.location_via(
        &format!("http://127.0.0.1:{}", silent.port),
        "diag-silent",
        None,
    );
    let started = std::time::Instant::now();
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_diagnosis(&run, &location, "tcp", &[]).await;
    let details = run.step("tcp")["details"].to_string();
    assert!(
        details.contains("timed out after 2s connecting to"),
        "{details}"
    );

    // A port that accepts and never answers: over https the handshake is what times out.
    let hung = Faulty::silent();
    let location = s3.location_via(&hung.https_url(), "diag-silent", None);
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "tls", &[]).await;
    let details = run.step("tls")["details"].to_string();
    assert!(
        details.contains("timed out after 2s in the TLS handshake"),
        "{details}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_provider_is_not_checked_as_the_reconciler_leaves_it() {
    let s3 = SeaweedFs::shared();
    let mut location = s3.location("diag-plugin", None);
    location.spec.provider = "example.io/plugin".into();
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "credentials", &[]).await;
    assert_eq!(
        run.step("credentials")["verdict"],
        "skipped",
        "{}",
        run.text()
    );
    assert!(
        run.step("credentials")["details"]
            .to_string()
            .contains("left to Velero"),
        "{}",
        run.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_named_as_such() {
    let s3 = SeaweedFs::shared();
    let ca = Ca::new("diagnose CA").unwrap_or_else(|e| panic!("{e}"));
    let port = tls_server(
        &ca.issue_server(&["minio.internal"], &[])
            .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    let mut location = s3.location_via(&format!("https://127.0.0.1:{port}"), "diag-name", None);
    location.spec.object_storage.ca_cert = Some(ByteString(ca.cert_pem().into_bytes()));
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "tls", &[]).await;
    let fix = run.step("tls")["fix"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        fix.starts_with(
            "the certificate is valid for minio.internal, not for 127.0.0.1: use the DNS name"
        ),
        "{fix}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_named_as_such() {
    let s3 = SeaweedFs::shared();
    let ca = Ca::new("diagnose CA").unwrap_or_else(|e| panic!("{e}"));
    let port = tls_server(
        &ca.issue_expired_server(&["localhost"], &LOCALHOST)
            .unwrap_or_else(|e| panic!("{e}")),
    )
    .await;
    let mut location = s3.location_via(&format!("https://127.0.0.1:{port}"), "diag-expired", None);
    location.spec.object_storage.ca_cert = Some(ByteString(ca.cert_pem().into_bytes()));
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "tls", &[]).await;
    let details = run.step("tls")["details"].to_string();
    assert!(details.contains("expired on 2021-01-01"), "{details}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_ca_fails_tls_and_ca_cert_fixes_it() {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("diag-ca").await;
    let mut location = s3.location_via(&s3.https_endpoint, "diag-ca", None);
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "tls", &[]).await;
    let fix = run.step("tls")["fix"].to_string();
    assert!(fix.contains("objectStorage.caCert"), "{fix}");
    assert!(fix.contains("bsl-sentinel storage test CA"), "{fix}");

    location.spec.object_storage.ca_cert = Some(ByteString(test_ca_pem().into_bytes()));
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "none", &[]).await;
    assert!(
        run.step("tls")["details"]
            .to_string()
            .contains("verified with the configured caCert"),
        "{}",
        run.text()
    );

    // The same CA from a file standing for caCertRef.
    location.spec.object_storage.ca_cert = None;
    let offline = Offline::new();
    let ca = offline.write("ca.crt", test_ca_pem().as_bytes());
    let mut by_ref = location.clone();
    by_ref.spec.object_storage.ca_cert_ref = Some(bsl_sentinel::bsl::SecretKeySelector {
        key: "ca.crt".into(),
        name: Some("storage-ca".into()),
        optional: None,
    });
    let run = offline.diagnose(&by_ref, &["--ca-file", &ca], &[]).await;
    assert_eq!(run.stopped_at(), "none", "{}", run.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_fails_the_bucket_step() {
    let s3 = SeaweedFs::shared();
    let location = s3.location("diag-no-such-bucket", None);
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "bucket", &[]).await;
    assert_eq!(run.step("authentication")["verdict"], "ok");
    assert!(
        run.step("bucket")["fix"]
            .to_string()
            .contains("create the bucket"),
        "{}",
        run.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_top_level_directories_fail_the_layout_step() {
    let s3 = SeaweedFs::shared();
    s3.seed("diag-foreign", &["backups/b1/x", "photos/cat.jpg"])
        .await;
    let location = s3.location("diag-foreign", None);
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "layout", &[]).await;
    let details = run.step("layout")["details"].to_string();
    assert!(details.contains("not Velero's: photos"), "{details}");
    assert!(
        run.step("layout")["fix"]
            .to_string()
            .contains("objectStorage.prefix"),
        "{}",
        run.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_in_the_environment_is_named_and_used() {
    const PASSWORD: &str = "pr0xy-diagnose-s3cret";
    let s3 = SeaweedFs::shared();
    s3.create_bucket("diag-proxy").await;
    let proxy = ForwardProxy::start("svc", PASSWORD).await;
    let https_proxy = format!("http://svc:{PASSWORD}@127.0.0.1:{}", proxy.port);
    // storage.test: a name only the proxy resolves, which the server's certificate holds.
    let port = s3.https_endpoint.rsplit(':').next().unwrap_or_default();
    let mut location = s3.location_via(&format!("https://storage.test:{port}"), "diag-proxy", None);
    location.spec.object_storage.ca_cert = Some(ByteString(test_ca_pem().into_bytes()));
    let env = [("HTTPS_PROXY", https_proxy.as_str())];
    let run = Offline::new().diagnose(&location, &[], &env).await;
    assert_eq!(run.stopped_at(), "none", "{}", run.text());
    assert_eq!(run.code, Some(0));
    let endpoint = run.step("endpoint")["details"].to_string();
    assert!(
        endpoint.contains(&format!(
            "proxy: http://127.0.0.1:{} (from HTTPS_PROXY)",
            proxy.port
        )),
        "{endpoint}"
    );
    assert!(
        proxy
            .seen()
            .iter()
            .any(|l| l.starts_with("CONNECT storage.test:")),
        "{:?}",
        proxy.seen()
    );
    assert_no_secrets(&run.text(), &[PASSWORD]);
    // The reconciler, with the same environment, agrees.
    let (proxies, _) = Proxies::from_vars(|v| (v == "HTTPS_PROXY").then(|| https_proxy.clone()));
    assert_eq!(
        reconciler_check(&location, proxies).await,
        Outcome::Available
    );

    // A proxy that is not there fails the TCP step, and says so.
    let closed = free_ports(1)[0];
    let gone = format!("http://127.0.0.1:{closed}");
    let run = Offline::new()
        .diagnose(&location, &[], &[("HTTPS_PROXY", gone.as_str())])
        .await;
    assert_eq!(run.stopped_at(), "tcp", "{}", run.text());
    assert!(
        run.step("tcp")["fix"].to_string().contains("NO_PROXY"),
        "{}",
        run.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_gcs_and_azure_locations_pass() {
    let gcs = FakeGcs::shared();
    gcs.create_bucket("diag-gcs").await;
    let location = gcs.location("diag-gcs", None);
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(&run, &location, "none", &[]).await;

    let azure = Azurite::shared();
    azure.create_container("diag-azure").await;
    let location = azure.location("diag-azure", None);
    let run = Offline::new().diagnose(&location, &[], &[]).await;
    assert_diagnosis(
        &run,
        &location,
        "none",
        &[crate::support::storage::AZURITE_KEY],
    )
    .await;
}

/// moto stands in for AWS itself: the bucket's region is looked up there, which only the
/// library can point at (as the reconciler's tests do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_aws_location_has_its_region_looked_up() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = Moto::shared();
    moto.seed("diag-moto", "eu-west-3", &["backups/b1/x"]).await;
    let location = moto.location("diag-moto");
    let probe = Probe::new(1, Duration::from_secs(5)).with_aws_service(&moto.endpoint);
    let manifest = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "diag"}, "spec": location.spec});
    let input = Input {
        location: "moto".into(),
        document: manifest,
        secrets: Secrets::Files {
            credential: Some(location.credential.clone()),
            ca: None,
        },
    };
    let report = run::diagnose(input, &probe, Duration::from_secs(5)).await;
    assert!(report.available, "{}", report.table());
    let endpoint = report.steps[2].details.join("\n");
    assert!(
        endpoint.contains("region: eu-west-3, looked up"),
        "{endpoint}"
    );
    assert_eq!(
        probe
            .check(&location.spec, Some(&location.credential), None)
            .await,
        Outcome::Available
    );
    assert!(!report.table().contains("moto-test-secret-key"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_the_cluster_a_missing_secret_fails_credentials_and_a_present_one_passes() {
    let plane = ControlPlane::get(Crd::Velero);
    let ns = plane.namespace("diagnose");
    let s3 = SeaweedFs::shared();
    s3.create_bucket("diag-cluster").await;
    let location = s3.location("diag-cluster", None);
    let kubectl = plane.kubectl();
    let mut spec: Value = serde_json::to_value(&location.spec).unwrap_or_default();
    spec["credential"] = json!({"name": "not-there", "key": "cloud"});
    let bsl = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "missing"}, "spec": spec});
    assert!(kubectl.apply(&ns, &bsl.to_string()).success);
    let good = location.spec_with_secret(&kubectl, &ns, "cloud");
    let bsl = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "good"}, "spec": good});
    assert!(kubectl.apply(&ns, &bsl.to_string()).success);
    let kubeconfig = plane.kubeconfig.display().to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str())];

    let run = bsl_sentinel(
        &[
            "missing",
            "-n",
            &ns,
            "-o",
            "json",
            "--check-timeout",
            TIMEOUT,
        ],
        &env,
    )
    .await;
    assert_eq!(
        (run.stopped_at().as_str(), run.code),
        ("credentials", Some(1)),
        "{}",
        run.text()
    );
    let step = run.step("credentials");
    assert!(
        step["details"]
            .to_string()
            .contains("Secret \\\"not-there\\\" not found"),
        "{step}"
    );
    assert!(step["fix"].to_string().contains("kubectl -n"), "{step}");

    let run = bsl_sentinel(&["good", "-n", &ns, "--check-timeout", TIMEOUT], &env).await;
    assert_eq!(run.code, Some(0), "{}", run.text());
    assert_no_secrets(&run.text(), &[]);

    let run = bsl_sentinel(&["nope", "-n", &ns], &env).await;
    assert_eq!(run.code, Some(2), "{}", run.text());
}

#[tokio::test]
async fn unreadable_input_exits_2() {
    let run = bsl_sentinel(&["-f", "/nonexistent/bsl.yaml"], &[]).await;
    assert_eq!(run.code, Some(2), "{}", run.text());
    let offline = Offline::new();
    let file = offline.write("bsl.yaml", b"kind: [unclosed");
    assert_eq!(bsl_sentinel(&["-f", &file], &[]).await.code, Some(2));
    let run = bsl_sentinel(&["-f", &file, "extra-name"], &[]).await;
    assert_eq!(
        run.code,
        Some(2),
        "flags are checked at parse time: {}",
        run.text()
    );
}
