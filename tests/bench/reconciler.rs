//! Reconciler benchmark: N BSLs on one S3 endpoint (SeaweedFS behind a counting TCP proxy on
//! 127.0.0.1), against the real control plane. Reports the time until the healthy BSLs and all
//! BSLs have a phase, the healthy time as a ratio to the run without a fault, the peak of
//! concurrent connections to each endpoint, storage requests per check and the peak RSS of
//! bsl-sentinel; first with no fault, then with every tenth BSL on a port where nothing
//! listens, on an endpoint that never answers, and on one that answers after 5 s.
//!
//! cargo build --release && cargo run --release --example bench-reconciler -- \
//!     [--sizes 1000,10000] [--faults dead,silent,slow]
//!     [--floor] [--against-velero [--cap 180]] [--steady SECONDS [--spread]]
//!     [--max-connections-per-endpoint 4]
//! (BSL_SENTINEL_BIN=path benches another bsl-sentinel build.)
//!
//! --floor adds, after each run without a fault, the floor of that run: a bare client that
//! merge-patches the same status onto the same number of fresh BSLs, 32 at a time (as many as
//! bsl-sentinel writes at once), watched the same way; with the apiserver's CPU seconds per
//! 1,000 BSLs phased for both; then the floor with checks, the same patches each after the
//! listing a check makes (what is left of the ratio beside it is bsl-sentinel's own).
//!
//! --steady SECONDS phases the BSLs on a 1-minute validation frequency, then counts for
//! SECONDS the status writes bsl-sentinel makes (BSLs and its server status ConfigMap) and its
//! CPU; with --spread the BSLs are created in ten batches over a minute, so their checks
//! spread over it.
//!
//! --against-velero runs the dead-port and silent-endpoint cases on Velero's stock CRD, first
//! with the real `velero server` validating the BSLs (its defaults), then with bsl-sentinel,
//! each in a namespace of its own, and stops waiting on either after --cap seconds.

#[allow(dead_code, unused_imports)]
#[path = "../integration/support/mod.rs"]
mod support;

#[allow(dead_code)]
#[path = "measure.rs"]
mod measure;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use base64::Engine;
use bsl_sentinel::bsl::{BackupStorageLocation, Phase};
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use measure::{
    apiserver_cpu_secs, apiserver_requests, arg, cores, count_arg, process_cpu_secs, requests_per,
};
use object_store::ObjectStore;
use serde_json::{Value, json};
use support::control_plane::free_port;
use support::faults::{Faulty, Mode};
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

/// What the faulty tenth of the BSLs points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// A port where nothing listens: connections are refused at once.
    Dead,
    /// An endpoint that accepts and never answers.
    Silent,
    /// An endpoint that answers after 5 s.
    Slow,
}

impl Fault {
    /// The faulty BSLs' URL, and the endpoint behind it to keep alive while they are checked
    /// (none for a dead port, or with no fault).
    fn endpoint(self, upstream: &str) -> (Option<Faulty>, String) {
        let faulty = match self {
            Fault::None | Fault::Dead => None,
            Fault::Silent => Some(Faulty::start(upstream, Mode::Silent)),
            Fault::Slow => Some(Faulty::start(upstream, Mode::Slow(Duration::from_secs(5)))),
        };
        let url = match &faulty {
            Some(f) => f.url(),
            None => format!("http://127.0.0.1:{}", free_port()),
        };
        (faulty, url)
    }

    fn label(self) -> &'static str {
        match self {
            Fault::None => "no fault",
            Fault::Dead => "10% on a dead port",
            Fault::Silent => "10% on a silent endpoint",
            Fault::Slow => "10% on a 5s-slow endpoint",
        }
    }
}

/// When the first BSL, the healthy BSLs and all BSLs had a phase, and the counts at the end.
struct Phased {
    first: Option<Duration>,
    healthy: Option<Duration>,
    all: Option<Duration>,
    counts: (usize, usize, usize),
}

/// Whether a phase is one a check writes.
fn checked(phase: &Option<Phase>) -> bool {
    matches!(phase, Some(Phase::Available | Phase::Unavailable))
}

/// Follows the namespace's BSLs with a watch until all `n` have a phase (or `limit` passes).
/// A watch costs the apiserver one small event per status write; listing 10,000 BSLs every
/// half second (how this bench first measured) cost it more than bsl-sentinel's own writes.
/// The tallies are kept per event, not recounted: recounting 10,000 entries per event took
/// seconds of the CPU the measured processes share.
async fn wait_phased(
    plane: &ControlPlane,
    ns: &str,
    n: usize,
    healthy_n: usize,
    faulty: impl Fn(&str) -> bool,
    started: Instant,
    limit: Duration,
) -> Phased {
    let api: Api<BackupStorageLocation> = Api::namespaced(plane.client().await, ns);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let deadline = tokio::time::Instant::now() + limit;
    let mut phases: HashMap<String, Option<Phase>> = HashMap::new();
    // BSLs with a checked phase, all and healthy ones.
    let (mut phased, mut phased_healthy) = (0usize, 0usize);
    let (mut first, mut healthy, mut all) = (None, None, None);
    while let Ok(Some(Ok(event))) = tokio::time::timeout_at(deadline, stream.next()).await {
        let (name, now) = match event {
            watcher::Event::Apply(bsl) | watcher::Event::InitApply(bsl) => {
                (bsl.name_any(), Some(bsl.phase()))
            }
            watcher::Event::Delete(bsl) => (bsl.name_any(), None),
            watcher::Event::Init | watcher::Event::InitDone => continue,
        };
        let was = match &now {
            Some(phase) => phases.insert(name.clone(), *phase),
            None => phases.remove(&name),
        };
        let delta = isize::from(now.as_ref().is_some_and(checked))
            - isize::from(was.as_ref().is_some_and(checked));
        phased = phased.saturating_add_signed(delta);
        if !faulty(&name) {
            phased_healthy = phased_healthy.saturating_add_signed(delta);
        }
        if first.is_none() && phased > 0 {
            first = Some(started.elapsed());
        }
        if healthy.is_none() && phased_healthy == healthy_n {
            healthy = Some(started.elapsed());
        }
        if phased == n {
            all = Some(started.elapsed());
            break;
        }
    }
    Phased {
        first,
        healthy,
        all,
        counts: count(&phases),
    }
}

/// `a` as a multiple of `b`, or a dash where either never came.
fn ratio(a: Option<Duration>, b: Option<Duration>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64()),
        _ => "  -  ".into(),
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map(|d| format!("{:>6.1}s", d.as_secs_f64()))
        .unwrap_or_else(|| "  never".into())
}

/// The secret every BSL's credential names, with the storage server's keys.
fn credential_secret(kubectl: &support::Kubectl, ns: &str, s3: &SeaweedFs) {
    let credentials = base64::engine::general_purpose::STANDARD.encode(s3.credentials());
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cloud-credentials"}, "data": {"cloud": credentials}});
    assert!(kubectl.apply(ns, &secret.to_string()).success);
}

/// `n` BSLs named bsl-00000.., bsl-00001 the default; the faulty ones point at `bad_url`.
fn create_bsls(
    kubectl: &support::Kubectl,
    ns: &str,
    names: std::ops::Range<usize>,
    endpoint: &str,
    bad_url: &str,
    is_faulty: impl Fn(usize) -> bool,
) {
    for chunk in names.collect::<Vec<_>>().chunks(500) {
        let items: Vec<Value> = chunk
            .iter()
            .map(|i| {
                let url = if is_faulty(*i) { bad_url } else { endpoint };
                json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": format!("bsl-{i:05}")},
                       "spec": {"provider": "aws", "default": *i == 1, "objectStorage": {"bucket": "bench", "prefix": "velero"},
                                "credential": {"name": "cloud-credentials", "key": "cloud"},
                                "config": {"region": "us-east-1", "s3Url": url, "s3ForcePathStyle": "true"}}})
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        let out = kubectl.run_with_stdin(&["create", "-n", ns, "-f", "-"], &list.to_string());
        assert!(out.success, "{}", out.stderr);
    }
}

fn faulty_name(name: &str, is_faulty: impl Fn(usize) -> bool) -> bool {
    name.strip_prefix("bsl-")
        .and_then(|i| i.parse::<usize>().ok())
        .is_some_and(is_faulty)
}

/// bsl-sentinel as every run starts it: one check per BSL in the run (no second round).
/// bsl-sentinel's bound on checks and sockets per endpoint: its default unless the bench's
/// `--max-connections-per-endpoint` passes another.
fn per_endpoint() -> usize {
    count_arg("--max-connections-per-endpoint", 4)
}

async fn start_sentinel(plane: &ControlPlane, ns: &str) -> Sentinel {
    start_sentinel_every(plane, ns, "1h").await
}

async fn start_sentinel_every(plane: &ControlPlane, ns: &str, frequency: &str) -> Sentinel {
    let limit = per_endpoint().to_string();
    let flags = [
        "--max-connections-per-endpoint",
        &limit,
        "--validation-frequency",
        frequency,
        "--check-timeout",
        "10s",
        "--lease-duration",
        "15s",
    ];
    let log = measure::log_level();
    let env = [("RUST_LOG", log.as_str())];
    Sentinel::start_with(plane, &plane.kubeconfig, ns, "bench", &flags, &env).await
}

/// The shared storage server with the bucket every healthy BSL points at.
async fn seeded_storage() -> &'static SeaweedFs {
    let s3 = SeaweedFs::shared();
    s3.seed("bench", &["velero/backups/b/velero-backup.json"])
        .await;
    s3
}

/// The floor of a run without a fault: `n` fresh BSLs given the status a check writes by a
/// bare client, 32 patches at a time, timed to all phased as the watch sees it. With
/// `checks`, each patch follows the listing a check makes, at most `per_endpoint()` at once
/// as bsl-sentinel bounds them: the same storage work on the same cores, without bsl-sentinel.
async fn floor(plane: &'static ControlPlane, s3: &SeaweedFs, n: usize, checks: bool) -> Measured {
    let ns = plane.namespace(&format!(
        "floor-{n}-{}",
        if checks { "checks" } else { "patches" }
    ));
    let store = s3.store("bench");
    let listings = Arc::new(tokio::sync::Semaphore::new(per_endpoint()));
    let kubectl = plane.kubectl();
    credential_secret(&kubectl, &ns, s3);
    create_bsls(&kubectl, &ns, 0..n, &s3.endpoint, &s3.endpoint, |_| false);
    let api: Api<BackupStorageLocation> = Api::namespaced(plane.client().await, &ns);
    let cpu = apiserver_cpu_secs(plane);
    let requests = apiserver_requests(&kubectl);
    let started = Instant::now();
    let writes = futures::stream::iter(0..n)
        .map(|i| {
            let (api, store, listings) = (api.clone(), store.clone(), listings.clone());
            async move {
                if checks {
                    let _permit = listings.acquire().await;
                    let prefix = object_store::path::Path::from("velero");
                    if let Err(e) = store.list_with_delimiter(Some(&prefix)).await {
                        panic!("the floor's listing failed: {e}");
                    }
                }
                let status = json!({"status": {"phase": "Available", "message": "BackupStorageLocation is valid",
                    "lastValidationTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}});
                api.patch(&format!("bsl-{i:05}"), &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>();
    let watched = wait_phased(
        plane,
        &ns,
        n,
        n,
        |_| false,
        started,
        Duration::from_secs(600),
    );
    let (results, phased) = tokio::join!(writes, watched);
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert_eq!(
        failed,
        0,
        "the floor's patches failed: {:?}",
        results.iter().find(|r| r.is_err())
    );
    let apiserver_cpu = apiserver_cpu_secs(plane) - cpu;
    let requests = requests_per(&requests, &apiserver_requests(&kubectl), n);
    kubectl.run(&["delete", "namespace", &ns, "--wait=false"]);
    Measured {
        first: phased.first,
        healthy: phased.healthy,
        all: phased.all,
        apiserver_cpu,
        requests,
    }
}

/// What one run measured: the ratios to the run without a fault and to the floor use these.
struct Measured {
    /// When the first BSL had a phase: start-up (process, list, Lease) and the first check.
    first: Option<Duration>,
    healthy: Option<Duration>,
    all: Option<Duration>,
    apiserver_cpu: f64,
    /// The apiserver's requests per BSL, by verb and resource.
    requests: String,
}

/// One run: `n` BSLs, every tenth on the fault's endpoint.
async fn run(
    plane: &'static ControlPlane,
    s3: &SeaweedFs,
    n: usize,
    fault: Fault,
    baseline: Option<Duration>,
) -> Measured {
    let counters = Arc::new(Counters::default());
    let upstream = s3.endpoint.trim_start_matches("http://").to_string();
    let port = proxy(upstream.clone(), counters.clone()).await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let (faulty_endpoint, bad_url) = fault.endpoint(&upstream);
    let is_faulty = |i: usize| fault != Fault::None && i.is_multiple_of(10);
    let ns = plane.namespace(&format!("bench-{n}-{fault:?}").to_lowercase());
    let kubectl = plane.kubectl();
    credential_secret(&kubectl, &ns, s3);
    create_bsls(&kubectl, &ns, 0..n, &endpoint, &bad_url, is_faulty);

    let cpu = apiserver_cpu_secs(plane);
    let requests = apiserver_requests(&kubectl);
    let started = Instant::now();
    let sentinel = start_sentinel(plane, &ns).await;
    let pid = sentinel.pid();
    let limit = Duration::from_secs(if fault == Fault::Slow { 180 } else { 600 });
    let healthy = (0..n).filter(|i| !is_faulty(*i)).count();
    let phased = wait_phased(
        plane,
        &ns,
        n,
        healthy,
        |b| faulty_name(b, is_faulty),
        started,
        limit,
    )
    .await;
    let apiserver_cpu = apiserver_cpu_secs(plane) - cpu;
    let sentinel_cpu = process_cpu_secs(pid);
    let requests_per_bsl = requests_per(&requests, &apiserver_requests(&kubectl), n);
    let requests = counters.requests.load(Ordering::SeqCst);
    let of_no_fault = ratio(phased.healthy, baseline);
    let faulty_peak = faulty_endpoint
        .as_ref()
        .map(|f| format!(", {} to the faulty one", f.peak_connections()))
        .unwrap_or_default();
    println!(
        "{n:>6} BSLs, {:<26} | healthy phased in {} ({of_no_fault} of no fault) | all phased in {} ({} Available, {} Unavailable, {} other) | peak connections {} to the healthy endpoint{faulty_peak} (limit {}) | {:.2} storage requests per healthy check | peak RSS {:.1} MiB | bsl-sentinel CPU {:.2}s per 1,000 BSLs",
        fault.label(),
        secs(phased.healthy),
        secs(phased.all),
        phased.counts.0,
        phased.counts.1,
        phased.counts.2,
        counters.peak.load(Ordering::SeqCst),
        per_endpoint(),
        requests as f64 / healthy.max(1) as f64,
        peak_rss_mib(pid),
        sentinel_cpu * 1000.0 / n as f64,
    );
    drop(sentinel);
    kubectl.run(&["delete", "namespace", &ns, "--wait=false"]);
    Measured {
        first: phased.first,
        healthy: phased.healthy,
        all: phased.all,
        apiserver_cpu,
        requests: requests_per_bsl,
    }
}

/// Steady state: `n` healthy BSLs on Velero's default validation frequency (1m), phased, then
/// watched for `window`: the apiserver requests bsl-sentinel made in it and its CPU.
async fn steady(
    plane: &'static ControlPlane,
    s3: &SeaweedFs,
    n: usize,
    window: Duration,
    spread: bool,
) {
    let ns = plane.namespace(&format!("steady-{n}"));
    let kubectl = plane.kubectl();
    credential_secret(&kubectl, &ns, s3);
    let started = Instant::now();
    let sentinel = if spread {
        // Ten batches over the minute, so the checks spread over it as in a cluster whose
        // BSLs were created at different times.
        let sentinel = start_sentinel_every(plane, &ns, "1m").await;
        for batch in 0..10 {
            create_bsls(
                &kubectl,
                &ns,
                batch * n / 10..(batch + 1) * n / 10,
                &s3.endpoint,
                "",
                |_| false,
            );
            tokio::time::sleep(Duration::from_secs(6)).await;
        }
        sentinel
    } else {
        create_bsls(&kubectl, &ns, 0..n, &s3.endpoint, "", |_| false);
        start_sentinel_every(plane, &ns, "1m").await
    };
    let pid = sentinel.pid();
    let limit = Duration::from_secs(600);
    wait_phased(plane, &ns, n, n, |_| false, started, limit).await;
    let (requests, cpu) = (apiserver_requests(&kubectl), process_cpu_secs(pid));
    tokio::time::sleep(window).await;
    let after = apiserver_requests(&kubectl);
    let count = |key: &str| after.get(key).unwrap_or(&0.0) - requests.get(key).unwrap_or(&0.0);
    println!(
        "{n:>6} BSLs{}, steady, validated every 1m, {}s watched | BSL status writes {:.0} | server status writes {:.0} | bsl-sentinel CPU {:.2}s",
        if spread { " created over a minute" } else { "" },
        window.as_secs(),
        count("PATCH backupstoragelocations"),
        // Server-side apply is counted under its own verb.
        count("APPLY configmaps") + count("PATCH configmaps"),
        process_cpu_secs(pid) - cpu,
    );
    drop(sentinel);
    kubectl.run(&["delete", "namespace", &ns, "--wait=false"]);
}

/// Who phases the BSLs in the comparison with Velero.
#[derive(Clone, Copy, Debug)]
enum Validator {
    Velero,
    Sentinel,
}

/// The validator's process, kept alive while the BSLs are watched.
enum Running {
    Velero(support::velero::VeleroServer),
    Sentinel(Sentinel),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Running::Velero(v) => v.pid(),
            Running::Sentinel(s) => s.pid(),
        }
    }
}

/// The same 1,000-BSL fault runs with Velero's own validation and with bsl-sentinel's, on
/// Velero's stock CRD; Velero's time is cut at `cap`.
async fn against_velero(n: usize, cap: Duration) {
    let plane = ControlPlane::get(Crd::Velero);
    support::velero::install_crds(plane, Crd::Velero);
    let s3 = seeded_storage().await;
    println!(
        "Velero v1.18.3 (default validation) beside bsl-sentinel, {n} BSLs on Velero's CRD, every tenth faulty, cut at {}s, {} cores",
        cap.as_secs(),
        cores()
    );
    let endpoint = s3.endpoint.clone();
    let upstream = endpoint.trim_start_matches("http://").to_string();
    let is_faulty = |i: usize| i.is_multiple_of(10);
    let healthy = (0..n).filter(|i| !is_faulty(*i)).count();
    for fault in [Fault::Dead, Fault::Silent] {
        let (_faulty_endpoint, bad_url) = fault.endpoint(&upstream);
        for validator in [Validator::Velero, Validator::Sentinel] {
            let ns = plane.namespace(&format!("vs-{validator:?}-{fault:?}").to_lowercase());
            let kubectl = plane.kubectl();
            credential_secret(&kubectl, &ns, s3);
            create_bsls(&kubectl, &ns, 0..n, &endpoint, &bad_url, is_faulty);
            let started = Instant::now();
            let running = match validator {
                Validator::Velero => {
                    Running::Velero(support::velero::VeleroServer::start(plane, &ns, &[]))
                }
                Validator::Sentinel => Running::Sentinel(start_sentinel(plane, &ns).await),
            };
            let phased = wait_phased(
                plane,
                &ns,
                n,
                healthy,
                |b| faulty_name(b, is_faulty),
                started,
                cap,
            )
            .await;
            // Velero's plugins run as child processes; the figure is the server process alone.
            println!(
                "{:<12} {:<26} | healthy phased in {} | all phased in {} ({} Available, {} Unavailable, {} without a phase) | peak RSS {:.1} MiB",
                format!("{validator:?}"),
                fault.label(),
                secs(phased.healthy),
                secs(phased.all),
                phased.counts.0,
                phased.counts.1,
                phased.counts.2,
                peak_rss_mib(running.pid()),
            );
            drop(running);
            kubectl.run(&["delete", "namespace", &ns, "--wait=false"]);
        }
    }
}

fn usage(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "1000,10000".into())
        .split(',')
        .map(|s| s.trim().parse().ok().filter(|n| *n > 0))
        .collect::<Option<_>>()
        .unwrap_or_else(|| usage("--sizes takes positive whole numbers, such as 1000,10000"));
    if std::env::args().any(|a| a == "--against-velero") {
        let cap = arg("--cap").map_or(Ok(180), |c| c.parse::<u64>());
        let Ok(cap) = cap else {
            usage("--cap takes whole seconds")
        };
        for n in sizes {
            against_velero(n, Duration::from_secs(cap)).await;
        }
        return;
    }
    let plane = ControlPlane::get(Crd::Project);
    let s3 = seeded_storage().await;
    println!(
        "bsl-sentinel reconciler, one SeaweedFS endpoint behind a counting proxy, {} cores",
        cores()
    );
    let faults: Vec<Fault> = match arg("--faults") {
        None => vec![Fault::None, Fault::Dead, Fault::Silent, Fault::Slow],
        Some(list) => list
            .split(',')
            .map(|f| match f.trim() {
                "none" => Some(Fault::None),
                "dead" => Some(Fault::Dead),
                "silent" => Some(Fault::Silent),
                "slow" => Some(Fault::Slow),
                _ => None,
            })
            .collect::<Option<_>>()
            .unwrap_or_else(|| {
                usage("--faults takes none, dead, silent and slow, such as dead,slow")
            }),
    };
    let with_floor = std::env::args().any(|a| a == "--floor");
    if let Some(window) = arg("--steady") {
        let Ok(window) = window.parse::<u64>() else {
            usage("--steady takes whole seconds")
        };
        let spread = std::env::args().any(|a| a == "--spread");
        for n in sizes {
            steady(plane, s3, n, Duration::from_secs(window), spread).await;
        }
        return;
    }
    for n in sizes {
        let baseline = run(plane, s3, n, Fault::None, None).await;
        if with_floor {
            let with_checks = floor(plane, s3, n, true).await;
            let floor = floor(plane, s3, n, false).await;
            let (floor_all, floor_cpu) = (floor.all, floor.apiserver_cpu);
            let of_floor = ratio(baseline.all, floor_all);
            let per_1000 = |cpu: f64| cpu * 1000.0 / n as f64;
            println!(
                "{n:>6} BSLs, floor: a bare client's merge patches, 32 at a time | all phased in {} | bsl-sentinel {of_floor} of it | apiserver CPU per 1,000 BSLs phased: bsl-sentinel {:.2}s, floor {:.2}s ({:.2}x)",
                secs(floor_all),
                per_1000(baseline.apiserver_cpu),
                per_1000(floor_cpu),
                baseline.apiserver_cpu / floor_cpu.max(f64::EPSILON),
            );
            println!(
                "{n:>6} BSLs, apiserver requests per BSL | bsl-sentinel: {} | floor: {}",
                baseline.requests, floor.requests
            );
            println!(
                "{n:>6} BSLs, floor with checks: the same, each patch after a listing, {} at a time | all phased in {} | bsl-sentinel {} of it | apiserver CPU per 1,000 BSLs phased {:.2}s",
                per_endpoint(),
                secs(with_checks.all),
                ratio(baseline.all, with_checks.all),
                per_1000(with_checks.apiserver_cpu),
            );
            // Splits the ratio into start-up and the rate of the writes after it.
            let span = |m: &Measured| m.all.zip(m.first).map(|(all, first)| all - first);
            println!(
                "{n:>6} BSLs, first phased after | bsl-sentinel {} | floor {} | first to all: bsl-sentinel {}, floor {} ({})",
                secs(baseline.first),
                secs(floor.first),
                secs(span(&baseline)),
                secs(span(&floor)),
                ratio(span(&baseline), span(&floor)),
            );
        }
        for fault in faults.iter().filter(|f| **f != Fault::None) {
            run(plane, s3, n, *fault, baseline.healthy).await;
        }
    }
}
