//! The demo: a real local control plane (etcd, kube-apiserver v1.37.2) with the project's CRD,
//! a real S3 server (SeaweedFS), and bsl-sentinel's webhook and reconciler running in this
//! process. A malformed BSL is rejected at kubectl apply; two valid ones get their phases.
//! `cargo run --example demo -- --keep` leaves it all running until Ctrl-C.

#[allow(dead_code, unused_imports)]
#[path = "../integration/support/mod.rs"]
mod support;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bsl_sentinel::reconciler::{self, Context, ReconcilerConfig};
use bsl_sentinel::serve::{WebhookArgs, start_webhook, watch_served_crd};
use support::control_plane::free_port;
use support::storage::SeaweedFs;
use support::webhook::SecretMount;
use support::{ControlPlane, Crd, Output};

const NS: &str = "velero";

fn step(text: &str) {
    println!("\n==> {text}");
}

fn show(out: Output) {
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
}

fn manifest(name: &str, s3_url: &str, default: bool) -> String {
    format!(
        "apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata:
  name: {name}
spec:
  provider: aws
  default: {default}
  objectStorage:
    bucket: velero-backups
    prefix: cluster-a
  credential:
    name: cloud-credentials
    key: cloud
  config:
    region: us-east-1
    s3Url: {s3_url}
    s3ForcePathStyle: \"true\"
"
    )
}

const MALFORMED: &str = "apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata:
  name: typo
spec:
  provider: aws
  objectStorage:
    bucket: velero-backups/cluster-a
  config:
    region: us-east-1
    s3ForcePathStyle: \"yes\"
    signatureVersion: \"2\"
  backupSyncPeriod: 5 minutes
";

#[tokio::main]
async fn main() {
    let keep = std::env::args().any(|a| a == "--keep");
    tracing_subscriber::fmt()
        .with_env_filter("bsl_sentinel::reconciler=info")
        .with_target(false)
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();

    step("starting etcd and kube-apiserver v1.37.2, and SeaweedFS as the S3 server, on 127.0.0.1");
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    let s3 = SeaweedFs::shared();
    s3.seed(
        "velero-backups",
        &["cluster-a/backups/first/velero-backup.json"],
    )
    .await;
    println!("apiserver {}; S3 {}", plane.server, s3.endpoint);
    kubectl.ok(&["create", "namespace", NS]);
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-credentials\nstringData:\n  cloud: |\n{}",
        s3.credentials()
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    assert!(kubectl.apply(NS, &secret).success);

    step("starting bsl-sentinel: webhook (TLS on 127.0.0.1) and reconciler");
    let client = plane.client().await;
    let served = watch_served_crd(client.clone(), Duration::from_secs(5));
    let mount = SecretMount::new(&plane.dir.join("demo-webhook-tls"));
    let webhook = WebhookArgs {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        cert: mount.cert(),
        key: mount.key(),
        cert_reload_interval: Duration::from_secs(10),
        workers: 1,
    };
    let readiness = bsl_sentinel::readiness::Readiness::new(served.clone());
    let running = start_webhook(&webhook, NS, client.clone(), served.clone(), readiness)
        .unwrap_or_else(|e| panic!("webhook: {e}"));
    tokio::spawn(running.server);
    while served.load().is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    support::webhook::register(&kubectl, NS, running.addr, &mount.ca.cert_pem()).await;
    let config = ReconcilerConfig {
        namespace: Some(NS.into()),
        status_namespace: NS.into(),
        identity: "demo".into(),
        check_timeout: Duration::from_secs(5),
        default_frequency: Duration::from_secs(30),
        per_endpoint: 4,
        proxies: Default::default(),
        secret_ttl: Duration::from_secs(30),
        health_reminder: Duration::from_secs(300),
    };
    let ctx = Context::new(client, served, Arc::default(), config);
    // Runs until the demo ends.
    let (_running, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(reconciler::run(ctx, stopping));

    step("kubectl apply of a malformed BSL: rejected, every bad field named");
    println!("{}", MALFORMED.trim());
    let out = kubectl.apply(NS, MALFORMED);
    println!(
        "(kubectl exit status: {})",
        if out.success { "0" } else { "non-zero" }
    );
    show(out);

    step(
        "kubectl apply of two valid BSLs, one on the S3 server, one on a port where nothing \
         listens: the object the create returns carries the webhook's initial phase",
    );
    let offline = format!("http://127.0.0.1:{}", free_port());
    for (name, url, default) in [
        ("primary", &s3.endpoint, true),
        ("offline", &offline, false),
    ] {
        show(kubectl.run_with_stdin(
            &[
                "apply",
                "-n",
                NS,
                "-f",
                "-",
                "-o",
                "jsonpath={.metadata.name} created: phase {.status.phase}, message \"{.status.message}\"{\"\\n\"}",
            ],
            &manifest(name, url, default),
        ));
    }

    step("a few seconds later: the reconciler's checks moved the phases");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        let table = kubectl.ok(&["get", "bsl", "-n", NS]).stdout;
        if table.contains("Available") && table.contains("Unavailable") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    show(kubectl.ok(&["get", "bsl", "-n", NS, "-o", "wide"]));

    if keep {
        step(&format!(
            "running; try: kubectl --kubeconfig {} get bsl -n {NS}   (Ctrl-C stops and cleans up)",
            plane.kubeconfig.display()
        ));
        let _ = tokio::signal::ctrl_c().await;
    }
}
