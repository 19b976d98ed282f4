//! Reconciler benchmark: N BSLs on one S3 endpoint (SeaweedFS behind a counting TCP proxy on
//! 127.0.0.1), against the real control plane. Reports the time until every BSL has a phase,
//! the peak of concurrent connections to the endpoint, storage requests per check and the peak
//! RSS of bsl-sentinel; then the same with 10% of the BSLs on a port where nothing listens.
//!
//! cargo build --release && cargo run --release --example bench-reconciler -- [--sizes 1000,10000]
//! (BSL_SENTINEL_BIN=path benches another bsl-sentinel build.)

#[allow(dead_code, unused_imports)]
#[path = "../integration/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use base64::Engine;
use bsl_sentinel::bsl::{BackupStorageLocation, Phase};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use support::control_plane::free_port;
use support::sentinel::Sentinel;
use support::storage::SeaweedFs;
use support::{ControlPlane, Crd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback TCP proxy that counts live connections (and their peak) and HTTP requests.
#[derive(Default)]
struct Counters {
    live: AtomicUsize,
    peak: AtomicUsize,
    requests: AtomicUsize,
}

async fn proxy(upstream: String, counters: Arc<Counters>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let counters = counters.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let live = counters.live.fetch_add(1, Ordering::SeqCst) + 1;
                counters.peak.fetch_max(live, Ordering::SeqCst);
                let (mut cr, mut cw) = client.split();
                let (mut sr, mut sw) = server.split();
                let up = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        // Requests from an HTTP/1.1 client start a write with their method.
                        if [&b"GET "[..], b"PUT ", b"POST ", b"HEAD ", b"DELETE "]
                            .iter()
                            .any(|m| buf[..n].starts_with(m))
                        {
                            counters.requests.fetch_add(1, Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                };
                let down = async {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
                counters.live.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    port
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// BSLs in the namespace by phase: (Available, Unavailable, other).
fn count(phases: &HashMap<String, Option<Phase>>) -> (usize, usize, usize) {
    phases
        .values()
        .fold((0, 0, 0), |(a, u, o), phase| match phase {
            Some(Phase::Available) => (a + 1, u, o),
            Some(Phase::Unavailable) => (a, u + 1, o),
            _ => (a, u, o + 1),
        })
}

/// Follows the namespace's BSLs with a watch until all `n` have a phase (or `limit` passes).
/// A watch costs the apiserver one small event per status write; listing 10,000 BSLs every
/// half second (how this bench first measured) cost it more than bsl-sentinel's own writes.
async fn wait_phased(
    plane: &ControlPlane,
    ns: &str,
    n: usize,
    limit: Duration,
) -> (usize, usize, usize) {
    let api: Api<BackupStorageLocation> = Api::namespaced(plane.client().await, ns);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let deadline = tokio::time::Instant::now() + limit;
    let mut phases = HashMap::new();
    let mut last = (0, 0, 0);
    while let Ok(Some(Ok(event))) = tokio::time::timeout_at(deadline, stream.next()).await {
        match event {
            watcher::Event::Apply(bsl) | watcher::Event::InitApply(bsl) => {
                phases.insert(bsl.name_any(), bsl.phase());
            }
            watcher::Event::Delete(bsl) => {
                phases.remove(&bsl.name_any());
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
        last = count(&phases);
        if last.0 + last.1 == n {
            break;
        }
    }
    last
}

async fn run(plane: &'static ControlPlane, s3: &SeaweedFs, n: usize, dead_share: usize) {
    let counters = Arc::new(Counters::default());
    let upstream = s3.endpoint.trim_start_matches("http://").to_string();
    let port = proxy(upstream, counters.clone()).await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let ns = plane.namespace(&format!("bench-{n}-{dead_share}"));
    let kubectl = plane.kubectl();
    let credentials = base64::engine::general_purpose::STANDARD.encode(s3.credentials());
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cloud-credentials"}, "data": {"cloud": credentials}});
    assert!(kubectl.apply(&ns, &secret.to_string()).success);
    s3.seed("bench", &["velero/backups/b/velero-backup.json"])
        .await;

    let created = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let items: Vec<Value> = chunk
            .iter()
            .map(|i| {
                let url = if dead_share > 0 && i % (100 / dead_share) == 0 { &dead } else { &endpoint };
                json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": format!("bsl-{i:05}")},
                       "spec": {"provider": "aws", "default": *i == 1, "objectStorage": {"bucket": "bench", "prefix": "velero"},
                                "credential": {"name": "cloud-credentials", "key": "cloud"},
                                "config": {"region": "us-east-1", "s3Url": url, "s3ForcePathStyle": "true"}}})
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        let out = kubectl.run_with_stdin(&["create", "-n", &ns, "-f", "-"], &list.to_string());
        assert!(out.success, "{}", out.stderr);
    }
    let create_time = created.elapsed();

    let started = Instant::now();
    let sentinel = Sentinel::start(
        plane,
        &ns,
        "bench",
        &[
            "--validation-frequency",
            "1h",
            "--check-timeout",
            "10s",
            "--lease-duration",
            "15s",
        ],
    );
    let pid = sentinel.pid();
    let last = wait_phased(plane, &ns, n, Duration::from_secs(600)).await;
    let phased = started.elapsed();
    let requests = counters.requests.load(Ordering::SeqCst);
    let healthy = n - n * dead_share / 100;
    println!(
        "{n:>6} BSLs, {dead_share:>2}% on a dead port | created in {:>5.1}s | all phased in {:>5.1}s ({} Available, {} Unavailable, {} other) | peak connections to the endpoint {} (limit 4) | {:.2} storage requests per check | peak RSS {:.1} MiB",
        create_time.as_secs_f64(),
        phased.as_secs_f64(),
        last.0,
        last.1,
        last.2,
        counters.peak.load(Ordering::SeqCst),
        requests as f64 / healthy.max(1) as f64,
        peak_rss_mib(pid),
    );
    drop(sentinel);
    kubectl.run(&["delete", "namespace", &ns, "--wait=false"]);
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let plane = ControlPlane::get(Crd::Project);
    let s3 = SeaweedFs::shared();
    s3.seed("bench", &["velero/backups/b/velero-backup.json"])
        .await;
    println!(
        "bsl-sentinel reconciler, one SeaweedFS endpoint behind a counting proxy, {} cores",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    for n in sizes {
        for dead in [0, 10] {
            run(plane, s3, n, dead).await;
        }
    }
}
