//! The apiserver going away under a running reconciler (its connections closed, new ones
//! refused, as when the apiserver restarts): status writes back off and resume, the outage is
//! logged once when it starts and once when it ends, and no phase goes wrong or backwards.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::control_plane::Restartable;
use crate::support::faults::Link;
use crate::support::sentinel::Sentinel;
use crate::support::storage::SeaweedFs;
use crate::support::{ControlPlane, Crd};

const BSLS: usize = 20;

fn last_validations(plane: &ControlPlane, ns: &str) -> HashMap<String, (String, String)> {
    let out = plane.kubectl().run(&["get", "bsl", "-n", ns, "-o", "json"]);
    let list: Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&item["metadata"]["name"]),
                (
                    text(&item["status"]["phase"]),
                    text(&item["status"]["lastValidationTime"]),
                ),
            )
        })
        .collect()
}

/// `n` BSLs b00, b01, ... on one SeaweedFS bucket, sharing one credential Secret.
async fn create_bsls(plane: &ControlPlane, ns: &str, n: usize) {
    let s3 = SeaweedFs::shared();
    s3.create_bucket("apiserver-faults").await;
    let spec =
        s3.location("apiserver-faults", None)
            .spec_with_secret(&plane.kubectl(), ns, "cloud");
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": format!("b{i:02}")}, "spec": spec}))
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let out = plane
        .kubectl()
        .run_with_stdin(&["create", "-n", ns, "-f", "-"], &list.to_string());
    assert!(out.success, "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_outage_is_logged_once_and_writes_resume() {
    let plane = ControlPlane::get(Crd::Velero);
    let ns = plane.namespace("apiserver-outage");
    create_bsls(plane, &ns, BSLS).await;

    let link = Link::start(plane.server.trim_start_matches("https://"));
    let kubeconfig = plane.kubeconfig_for(
        &format!("kubeconfig-{ns}"),
        &format!("https://127.0.0.1:{}", link.port),
        "",
    );
    let sentinel = Sentinel::start_with(
        plane,
        &kubeconfig,
        &ns,
        "outage",
        &["--leader-election=false", "--validation-frequency", "1s"],
        &[],
    )
    .await;
    sentinel
        .wait_for("every BSL Available", Duration::from_secs(30), || {
            let now = last_validations(plane, &ns);
            now.len() == BSLS && now.values().all(|(phase, _)| phase == "Available")
        })
        .await;

    link.refuse();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let before = last_validations(plane, &ns);
    let log_at_outage = sentinel.log_text().len();
    link.accept();
    let back = Instant::now();
    sentinel
        .wait_for("writes to resume", Duration::from_secs(30), || {
            let now = last_validations(plane, &ns);
            now.iter().all(|(name, (phase, last))| {
                phase == "Available" && before.get(name).is_some_and(|(_, old)| last > old)
            })
        })
        .await;
    eprintln!(
        "status writes of {BSLS} BSLs resumed {:?} after the apiserver came back",
        back.elapsed()
    );

    let log = sentinel.log_text();
    assert_eq!(
        log.matches("cannot write status").count(),
        1,
        "one line when the outage starts:\n{log}"
    );
    assert!(
        log[log_at_outage..].contains("status writes work again"),
        "one line when it ends:\n{log}"
    );
    // Everything else the outage caused, at warning level or above.
    let noisy = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .count();
    assert!(noisy <= 6, "{noisy} warnings for one outage:\n{log}");
}

/// The apiserver killed and started again, then etcd, under 50 BSLs (a control plane of the
/// test's own): writes resume after each, no phase goes wrong, no lastValidationTime goes back,
/// and each outage is logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_and_etcd_restarts_under_50_bsls() {
    const N: usize = 50;
    let mut own = Restartable::start(Crd::Velero);
    let plane = &own.plane;
    let ns = plane.namespace("restarts");
    create_bsls(plane, &ns, N).await;
    let sentinel = Sentinel::start(
        plane,
        &ns,
        "restarts",
        &["--leader-election=false", "--validation-frequency", "1s"],
    )
    .await;
    sentinel
        .wait_for("every BSL Available", Duration::from_secs(60), || {
            let now = last_validations(plane, &ns);
            now.len() == N && now.values().all(|(phase, _)| phase == "Available")
        })
        .await;

    for peer in ["kube-apiserver", "etcd"] {
        let before = last_validations(plane, &ns);
        match peer {
            "etcd" => own.etcd.kill(),
            _ => own.apiserver.kill(),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        match peer {
            "etcd" => own.etcd.start(),
            _ => own.apiserver.start(),
        }
        let plane = &own.plane;
        own.wait_ready();
        let back = Instant::now();
        sentinel
            .wait_for(
                &format!("writes to resume after the {peer} restart"),
                Duration::from_secs(60),
                || {
                    let now = last_validations(plane, &ns);
                    now.len() == N
                        && now.iter().all(|(name, (phase, last))| {
                            phase == "Available"
                                && before.get(name).is_some_and(|(_, old)| last > old)
                        })
                },
            )
            .await;
        eprintln!(
            "{peer} killed for 5 s under {N} BSLs: every BSL written again {:?} after it was back",
            back.elapsed()
        );
    }
    let log = sentinel.log_text();
    let outages = log.matches("cannot write status").count();
    assert!(
        (1..=2).contains(&outages),
        "{outages} lines for two outages:\n{log}"
    );
    let noisy = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .count();
    assert!(noisy <= 12, "{noisy} warnings for two restarts:\n{log}");
}
