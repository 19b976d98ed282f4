//! The demo: a real local control plane with the project's CRD, a sample BSL, and what
//! `kubectl get bsl` shows. `cargo run --example demo -- --keep` leaves it running until Ctrl-C
//! and prints the kubeconfig to use.

#[allow(dead_code, unused_imports)]
#[path = "../integration/support/mod.rs"]
mod support;

use support::{ControlPlane, Crd};

const SAMPLE: &str = r#"
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata:
  name: default
spec:
  provider: aws
  default: true
  objectStorage:
    bucket: velero-backups
    prefix: cluster-a
  config:
    region: us-east-1
    s3Url: http://127.0.0.1:8333
    s3ForcePathStyle: "true"
"#;

fn step(text: &str) {
    println!("\n==> {text}");
}

fn show(out: support::Output) {
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
}

#[tokio::main]
async fn main() {
    let keep = std::env::args().any(|a| a == "--keep");
    step(
        "starting etcd and kube-apiserver v1.37.2 on 127.0.0.1 (first run builds them from Go modules)",
    );
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    println!("apiserver: {}", plane.server);

    step("the project's CRD is installed (bsl-sentinel crd)");
    show(kubectl.ok(&["get", "crd", "backupstoragelocations.velero.io"]));

    let ns = "velero";
    kubectl.ok(&["create", "namespace", ns]);
    step("kubectl apply of a sample BackupStorageLocation");
    println!("{}", SAMPLE.trim());
    show(kubectl.apply(ns, SAMPLE));

    step("kubectl get bsl -n velero");
    show(kubectl.ok(&["get", "bsl", "-n", ns, "-o", "wide"]));

    if keep {
        step(&format!(
            "running; try: kubectl --kubeconfig {} get bsl -A   (Ctrl-C stops and cleans up)",
            plane.kubeconfig.display()
        ));
        let _ = tokio::signal::ctrl_c().await;
    }
}
