//! Admission through the real apiserver: BSL creates, one at a time and 16 at once, timed at
//! the client, with each kind of admission a Velero user could put in front of them, each in a
//! namespace of its own on the same apiserver, in rounds of the same run; one at a time, the
//! creates go round the admissions create by create, so that the machine's drift falls on all:
//!
//! - none;
//! - a CEL ValidatingAdmissionPolicy holding the static rules (tests/bench/cel-policy.yaml),
//!   checked in the run to deny broken BSLs;
//! - the floor of a webhook hop: the cheapest webhook this bench can write (raw HTTP/1.1 over
//!   rustls, answering a fixed allowed review with the request's uid), registered as
//!   validating, as mutating (with no patch, and with bsl-sentinel's own initial-status patch,
//!   which costs the apiserver the same to apply), and as both;
//! - the same floor's answers served on bsl-sentinel's HTTP stack (`webhook::server`:
//!   actix-web over rustls), validating and mutating with the patch: what
//!   bsl-sentinel's hops cost beyond these is its handler's;
//! - bsl-sentinel (the release binary, webhook-only mode) validating, mutating, and both.
//!
//! Every webhook is registered from webhook-config/ as shipped but with failurePolicy Fail, so
//! that a webhook failing or timing out fails the run instead of looking fast. For each:
//! p50/p99, the latency it adds to no admission, the CPU per create 16 at once, and the
//! connections the apiserver held to the webhook while 16 creates ran (seen in /proc/net/tcp).
//!
//! cargo build --release && cargo run --release --example bench-admission -- \
//!     [--creates 400] [--concurrent-creates 1600] [--rounds 3] [--compare PATH]
//!
//! --compare PATH runs another build of bsl-sentinel beside the first (BSL_SENTINEL_BIN picks
//! the first), in the same rounds.

#[allow(dead_code, unused_imports)]
#[path = "../integration/support/mod.rs"]
mod support;

#[allow(dead_code)]
#[path = "measure.rs"]
mod measure;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use bsl_sentinel::admission::{PENDING_MESSAGE, initial_status_patch};
use bsl_sentinel::served_crd::ServedCrd;
use futures::StreamExt;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use measure::{apiserver_cpu_secs, arg, cores, count_arg, pct, process_cpu_secs, threads_cpu_secs};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use support::control_plane::free_port;
use support::sentinel::{Sentinel, binary};
use support::webhook::{SecretMount, apply_config};
use support::{ControlPlane, Crd, Kubectl, repo_root};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONCURRENCY: usize = 16;

fn bsl(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": name},
        "spec": spec
    })
}

/// A BSL every admission here admits, as a platform creates one.
fn valid(name: &str) -> Value {
    bsl(
        name,
        json!({
            "provider": "aws",
            "objectStorage": {"bucket": "velero", "prefix": "cluster-a"},
            "config": {"region": "us-east-1", "s3ForcePathStyle": "true",
                       "s3Url": "http://127.0.0.1:9000"},
            "validationFrequency": "1m",
            "accessMode": "ReadWrite"
        }),
    )
}

fn broken() -> [(Value, &'static str); 2] {
    [
        (
            bsl(
                "no-provider",
                json!({"provider": "", "objectStorage": {"bucket": "b"}}),
            ),
            "spec.provider",
        ),
        (
            bsl(
                "slash-bucket",
                json!({"provider": "aws", "objectStorage": {"bucket": "b/p"}}),
            ),
            "spec.objectStorage.bucket",
        ),
    ]
}

/// The floor of a webhook hop: raw HTTP/1.1 over rustls on its own runtime with as many
/// threads as bsl-sentinel's webhook workers. It parses nothing but the head's Content-Length
/// and the request's uid, and answers allowed; on /mutate-patch with bsl-sentinel's initial
/// status patch, precomputed.
struct Floor {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    reviews: Arc<AtomicUsize>,
}

fn start_floor(cert: &Path, key: &Path, patch: String, workers: usize) -> Floor {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("floor certificate: {e}"));
    let key = PrivateKeyDer::from_pem_slice(&read(key)).unwrap_or_else(|e| panic!("key: {e}"));
    let mut config = rustls::ServerConfig::builder_with_provider(bsl_sentinel::tls::provider())
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .unwrap_or_else(|e| panic!("floor TLS: {e}"));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind(("127.0.0.1", free_port()))
        .unwrap_or_else(|e| panic!("floor: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| panic!("{e}"));
    let (accepted, reviews) = (Arc::default(), Arc::default());
    let floor = Floor {
        addr,
        accepted: Arc::clone(&accepted),
        reviews: Arc::clone(&reviews),
    };
    let patch: Arc<str> = patch.into();
    let thread = std::thread::Builder::new().name("floor".into());
    let spawned = thread.spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("floor")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("floor runtime: {e}"));
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)
                .unwrap_or_else(|e| panic!("floor listener: {e}"));
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                accepted.fetch_add(1, Ordering::Relaxed);
                let (acceptor, patch, reviews) =
                    (acceptor.clone(), patch.clone(), Arc::clone(&reviews));
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        serve_floor(tls, &patch, &reviews).await;
                    }
                });
            }
        });
    });
    spawned.unwrap_or_else(|e| panic!("floor thread: {e}"));
    floor
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The floor's answer: allowed, with the request's uid found by a scan, not a parse; on
/// /mutate-patch with the precomputed patch.
fn floor_answer(body: &[u8], path: &str, patch: &str) -> String {
    // The apiserver writes request.uid first; a create's object has no uid yet.
    let uid = find(body, b"\"uid\":\"")
        .map(|i| &body[i + 7..])
        .and_then(|rest| Some(&rest[..find(rest, b"\"")?]))
        .unwrap_or_default();
    let uid = String::from_utf8_lossy(uid);
    let extra = if path == "/mutate-patch" {
        format!(r#","patchType":"JSONPatch","patch":"{patch}""#)
    } else {
        String::new()
    };
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"{uid}","allowed":true{extra}}}}}"#
    )
}

/// The floor's answers on bsl-sentinel's HTTP stack, in this process on actix's own threads,
/// as many workers as bsl-sentinel's webhook has; counts its reviews into `reviews`.
fn start_actix_floor(
    mount: &SecretMount,
    patch: String,
    workers: usize,
    reviews: Arc<AtomicUsize>,
) -> SocketAddr {
    use actix_web::{HttpRequest, HttpResponse, web};
    let cert = bsl_sentinel::tls::ReloadingCert::load(&mount.cert(), &mount.key())
        .unwrap_or_else(|e| panic!("actix floor certificate: {e}"));
    let tls = cert
        .server_config()
        .unwrap_or_else(|e| panic!("actix floor TLS: {e}"));
    let listener = std::net::TcpListener::bind(("127.0.0.1", free_port()))
        .unwrap_or_else(|e| panic!("actix floor: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let patch: Arc<str> = patch.into();
    let thread = std::thread::Builder::new().name("actix floor".into());
    let spawned = thread.spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("actix floor runtime: {e}"));
        runtime.block_on(async move {
            let configure = move |cfg: &mut web::ServiceConfig| {
                let (patch, reviews) = (patch.clone(), Arc::clone(&reviews));
                let answer = move |request: HttpRequest, body: web::Bytes| {
                    let answer = floor_answer(&body, request.path(), &patch);
                    reviews.fetch_add(1, Ordering::Relaxed);
                    async move {
                        HttpResponse::Ok()
                            .content_type("application/json")
                            .body(answer)
                    }
                };
                cfg.default_service(web::post().to(answer));
            };
            let server = bsl_sentinel::webhook::server(listener, tls, workers, configure)
                .unwrap_or_else(|e| panic!("actix floor: {e}"));
            server.await.unwrap_or_else(|e| panic!("actix floor: {e}"));
        });
    });
    spawned.unwrap_or_else(|e| panic!("actix floor thread: {e}"));
    addr
}

/// One keep-alive connection of the floor webhook; returns when the peer closes it.
async fn serve_floor(
    mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    patch: &str,
    reviews: &AtomicUsize,
) {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            match tls.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match tls.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        // The apiserver calls `path?timeout=5s`.
        let path = head.split([' ', '?']).nth(1).unwrap_or_default();
        let answer = floor_answer(&buf[head_end..head_end + length], path, patch);
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if tls.write_all(response.as_bytes()).await.is_err() {
            return;
        }
        reviews.fetch_add(1, Ordering::Relaxed);
        buf.drain(..head_end + length);
    }
}

/// The patch bsl-sentinel's mutating webhook answers a new BSL with on the project's CRD,
/// base64 as in an AdmissionResponse.
fn sentinel_patch() -> String {
    let served = ServedCrd {
        unknown_phase_allowed: true,
        status_subresource: false,
    };
    let patch = initial_status_patch(valid("x").get("status"), served)
        .unwrap_or_else(|| panic!("bsl-sentinel stamps no status on this CRD"));
    let bytes = serde_json::to_vec(&patch).unwrap_or_else(|e| panic!("patch: {e}"));
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// What shows that a namespace's admission is in force.
#[derive(Clone, Copy)]
enum Sign {
    /// A broken BSL is denied by this (named in the message), which names the field.
    Denies(&'static str),
    /// A valid BSL comes back with bsl-sentinel's initial status.
    Stamps,
    /// The floor answers this many reviews per create.
    FloorCalls(usize),
}

struct Scenario {
    label: String,
    ns: String,
    signs: Vec<Sign>,
    /// The webhook's port, whose connections from the apiserver are counted.
    port: Option<u16>,
    /// The scenarios whose added latency this one's is compared to.
    floors: Vec<usize>,
}

#[derive(Default)]
struct Samples {
    sequential: Vec<Duration>,
    concurrent: Vec<Duration>,
    /// Creates timed, and the apiserver's CPU seconds they cost.
    creates: usize,
    cpu: f64,
    peak_connections: usize,
    connections_seen: usize,
    /// CPU seconds of each webhook process (see `Meter`) while the creates ran.
    webhook_cpu: Vec<f64>,
}

/// A webhook process's CPU seconds so far, and its name.
struct Meter {
    name: String,
    cpu: Box<dyn Fn() -> f64>,
}

/// Registers webhook-config/`file` for `ns` with its webhook at `base` + `path(shipped path)`
/// and failurePolicy Fail.
fn register(
    kubectl: &Kubectl,
    ns: &str,
    file: &str,
    base: SocketAddr,
    path: &dyn Fn(&str) -> String,
    ca: &str,
) {
    let name = format!("bench-{ns}");
    let url = |shipped: &str| format!("https://{base}{}", path(shipped));
    apply_config(kubectl, file, &name, ns, &url, ca);
    let kind = if file.starts_with("validating") {
        "validatingwebhookconfiguration"
    } else {
        "mutatingwebhookconfiguration"
    };
    kubectl.ok(&[
        "patch",
        kind,
        &name,
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]"#,
    ]);
}

fn api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "velero.io".into(),
        version: "v1".into(),
        api_version: "velero.io/v1".into(),
        kind: "BackupStorageLocation".into(),
        plural: "backupstoragelocations".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn object(doc: Value) -> DynamicObject {
    serde_json::from_value(doc).unwrap_or_else(|e| panic!("BSL: {e}"))
}

/// Dry-run creates until every sign shows (the apiserver loads admission configuration
/// asynchronously), then checks the broken BSLs are denied where a sign says so.
async fn wait_in_force(api: &Api<DynamicObject>, scenario: &Scenario, floor: &Floor) {
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    for sign in &scenario.signs {
        loop {
            let shown = match *sign {
                Sign::Denies(by) => {
                    let (doc, field) = &broken()[0];
                    match api.create(&dry, &object(doc.clone())).await {
                        Err(kube::Error::Api(e)) => {
                            e.message.contains(by) && e.message.contains(field)
                        }
                        _ => false,
                    }
                }
                Sign::Stamps => api
                    .create(&dry, &object(valid("probe")))
                    .await
                    .is_ok_and(|o| o.data["status"]["message"] == PENDING_MESSAGE),
                Sign::FloorCalls(n) => {
                    let before = floor.reviews.load(Ordering::Relaxed);
                    let created = api.create(&dry, &object(valid("probe"))).await.is_ok();
                    created && floor.reviews.load(Ordering::Relaxed) - before == n
                }
            };
            if shown {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: admission not in force after 30 s",
                scenario.label
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if let Sign::Denies(by) = sign {
            for (doc, field) in broken() {
                match api.create(&dry, &object(doc)).await {
                    Err(kube::Error::Api(e))
                        if e.message.contains(by) && e.message.contains(field) => {}
                    other => panic!("{}: a BSL broken at {field} got {other:?}", scenario.label),
                }
            }
        }
    }
}

/// Established TCP connections to 127.0.0.1:`port`, by the peer's port.
fn connections(port: u16) -> HashSet<u16> {
    let local = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl, local address, remote address, state (01: established).
            (fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"01"))
                .then(|| fields.get(2)?.rsplit(':').next())
                .flatten()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
        })
        .collect()
}

/// Times `n` creates, `concurrency` at a time; every one must succeed, and come back with the
/// initial status where `stamped`.
async fn creates(
    api: &Api<DynamicObject>,
    (label, stamped): (&str, bool),
    prefix: &str,
    n: usize,
    concurrency: usize,
) -> Vec<Duration> {
    let params = PostParams::default();
    futures::stream::iter(0..n)
        .map(|i| {
            let (params, doc) = (&params, object(valid(&format!("{prefix}-{i}"))));
            async move {
                let start = Instant::now();
                match api.create(params, &doc).await {
                    Ok(created) => {
                        let took = start.elapsed();
                        let message = &created.data["status"]["message"];
                        assert!(!stamped || message == PENDING_MESSAGE, "{label}: unstamped");
                        took
                    }
                    Err(e) => panic!("{label}: create {prefix}-{i}: {e}"),
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await
}

/// Removes the namespace's BSLs (untimed) so every round starts from the same state.
async fn clear(api: &Api<DynamicObject>) {
    let _ = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    support::eventually("the BSLs to be gone", Duration::from_secs(120), || async {
        match api.list(&ListParams::default().limit(1)).await {
            Ok(list) if list.items.is_empty() => Ok(()),
            Ok(_) => Err("some remain".to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

/// Whether a scenario's creates must come back stamped, with its label for failures.
fn who(scenario: &Scenario) -> (&str, bool) {
    (
        scenario.label.as_str(),
        scenario.signs.iter().any(|s| matches!(s, Sign::Stamps)),
    )
}

/// One round. The creates one at a time go round the scenarios create by create (starting
/// each turn one scenario further on), so that the shared machine's drift falls on every
/// scenario alike; the 16 at once run scenario by scenario, with the CPU each process spends
/// counted over them.
async fn run_round(
    plane: &ControlPlane,
    meters: &[Meter],
    (apis, scenarios): (&[Api<DynamicObject>], &[Scenario]),
    round: usize,
    (sequential, concurrent): (usize, usize),
    samples: &mut [Samples],
) {
    // Warm: connections to the webhooks, the apiserver's caches.
    for (api, scenario) in apis.iter().zip(scenarios) {
        creates(
            api,
            who(scenario),
            &format!("warm-{round}"),
            32,
            CONCURRENCY,
        )
        .await;
    }
    for k in 0..sequential {
        for turn in 0..scenarios.len() {
            let i = (k + turn) % scenarios.len();
            let prefix = format!("s-{round}-{k}");
            let mut took = creates(&apis[i], who(&scenarios[i]), &prefix, 1, 1).await;
            samples[i].sequential.append(&mut took);
        }
    }
    for ((api, scenario), sample) in apis.iter().zip(scenarios).zip(samples.iter_mut()) {
        let cpu = apiserver_cpu_secs(plane);
        let webhook_cpu: Vec<f64> = meters.iter().map(|m| (m.cpu)()).collect();
        // Connections are sampled while the 16 concurrent creates run.
        let done = Arc::new(AtomicBool::new(false));
        let sampler = scenario.port.map(|port| {
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                let (mut peak, mut seen) = (0, HashSet::new());
                while !done.load(Ordering::Relaxed) {
                    let now = connections(port);
                    peak = peak.max(now.len());
                    seen.extend(now);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (peak, seen.len())
            })
        });
        let prefix = format!("c-{round}");
        let mut conc = creates(api, who(scenario), &prefix, concurrent, CONCURRENCY).await;
        done.store(true, Ordering::Relaxed);
        if let Some(sampler) = sampler
            && let Ok((peak, seen)) = sampler.await
        {
            sample.peak_connections = sample.peak_connections.max(peak);
            sample.connections_seen = sample.connections_seen.max(seen);
        }
        sample.cpu += apiserver_cpu_secs(plane) - cpu;
        sample.webhook_cpu.resize(meters.len(), 0.0);
        for ((total, meter), before) in sample.webhook_cpu.iter_mut().zip(meters).zip(webhook_cpu) {
            *total += (meter.cpu)() - before;
        }
        sample.creates += concurrent;
        sample.concurrent.append(&mut conc);
    }
    for api in apis {
        clear(api).await;
    }
}

fn ms(v: f64) -> String {
    format!("{v:.2}")
}

fn report(scenarios: &[Scenario], none: usize, meters: &[Meter], samples: &mut [Samples]) {
    for s in samples.iter_mut() {
        s.sequential.sort();
        s.concurrent.sort();
    }
    let p = |i: usize, q: f64| {
        (
            pct(&samples[i].sequential, q),
            pct(&samples[i].concurrent, q),
        )
    };
    println!(
        "\n{:<34} {:>17} {:>17} {:>17} {:>17} {:>9}",
        "admission",
        "1-at-a-time p50",
        "1-at-a-time p99",
        "16-at-once p50",
        "16-at-once p99",
        "conns"
    );
    println!(
        "{:<34} {:>17} {:>17} {:>17} {:>17}",
        "", "(added)", "(added)", "(added)", "(added)"
    );
    for (i, scenario) in scenarios.iter().enumerate() {
        let cell = |q: f64, concurrent: bool| {
            let pick = |(s, c): (f64, f64)| if concurrent { c } else { s };
            let (v, base) = (pick(p(i, q)), pick(p(none, q)));
            if i == none {
                ms(v)
            } else {
                format!("{} ({:+.2})", ms(v), v - base)
            }
        };
        let s = &samples[i];
        let conns = match scenario.port {
            Some(_) => format!("{} of {}", s.peak_connections, s.connections_seen),
            None => "-".into(),
        };
        println!(
            "{:<34} {:>17} {:>17} {:>17} {:>17} {:>9}",
            scenario.label,
            cell(0.5, false),
            cell(0.99, false),
            cell(0.5, true),
            cell(0.99, true),
            conns
        );
    }
    println!(
        "\n(added): to no admission, ms. conns: the most connections the apiserver held to the \
         webhook at once, of all it used, 16 at once."
    );
    println!(
        "\nCPU per create 16 at once, us (every process runs in every scenario: its cost in a"
    );
    println!(
        "scenario without its hop is what it spends beside, such as bsl-sentinel's watch of BSLs)"
    );
    print!("{:<34} {:>10}", "admission", "apiserver");
    for meter in meters {
        print!(" {:>26}", meter.name);
    }
    println!();
    for (scenario, s) in scenarios.iter().zip(samples.iter()) {
        let per = |cpu: f64| cpu * 1e6 / s.creates.max(1) as f64;
        print!("{:<34} {:>10.0}", scenario.label, per(s.cpu));
        for cpu in &s.webhook_cpu {
            print!(" {:>26.0}", per(*cpu));
        }
        println!();
    }
    println!("\neach webhook hop (the latency it adds) as a ratio to its floor's:");
    for (i, scenario) in scenarios.iter().enumerate() {
        for &f in &scenario.floors {
            let ratio = |q: f64, concurrent: bool| {
                let pick = |(s, c): (f64, f64)| if concurrent { c } else { s };
                let base = pick(p(none, q));
                let floor_added = pick(p(f, q)) - base;
                // A tail that no admission shares is noise, not a hop: no ratio.
                if floor_added <= 0.0 {
                    "   -  ".to_string()
                } else {
                    format!("{:>5.2}x", (pick(p(i, q)) - base) / floor_added)
                }
            };
            println!(
                "{:<34} vs {:<27} 1-at-a-time p50 {} p99 {}   16-at-once p50 {} p99 {}",
                scenario.label,
                scenarios[f].label,
                ratio(0.5, false),
                ratio(0.99, false),
                ratio(0.5, true),
                ratio(0.99, true),
            );
        }
    }
}

struct Webhook {
    sentinel: Sentinel,
    addr: SocketAddr,
}

async fn start_sentinel(
    plane: &ControlPlane,
    program: &Path,
    mount: &SecretMount,
    ns: &str,
    name: &str,
) -> Webhook {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // What deploy/ ships: info, no debug lines per review.
    let env = [("RUST_LOG", "info")];
    let sentinel = Sentinel::start_webhook_only(program, plane, ns, name, mount, addr, &env).await;
    Webhook { sentinel, addr }
}

#[tokio::main]
async fn main() {
    let sequential = count_arg("--creates", 400);
    let concurrent = count_arg("--concurrent-creates", 1600);
    let rounds = count_arg("--rounds", 3);
    let compare = arg("--compare").map(PathBuf::from);
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let mount = SecretMount::new(&plane.dir.join("bench-admission-cert"));
    let ca = mount.ca.cert_pem();
    let patch = sentinel_patch();
    let floor = start_floor(&mount.cert(), &mount.key(), patch.clone(), 2);
    let actix_floor = start_actix_floor(&mount, patch, 2, Arc::clone(&floor.reviews));
    let home = plane.namespace("bench-admission");

    let mut programs = vec![(binary(), "bsl-sentinel".to_string())];
    if let Some(other) = compare {
        let name = other
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        programs.push((other, format!("bsl-sentinel ({name})")));
    }
    let mut webhooks = Vec::new();
    for (i, (program, _)) in programs.iter().enumerate() {
        webhooks.push(start_sentinel(plane, program, &mount, &home, &format!("bench-{i}")).await);
    }

    let mut scenarios = Vec::new();
    let mut add = |label: &str, signs: Vec<Sign>, port: Option<u16>, floors: Vec<usize>| {
        let ns = plane.namespace("adm");
        scenarios.push(Scenario {
            label: label.to_string(),
            ns,
            signs,
            port,
            floors,
        });
        scenarios.len() - 1
    };
    let none = add("none", vec![], None, vec![]);
    let cel = add(
        "CEL ValidatingAdmissionPolicy",
        vec![Sign::Denies("ValidatingAdmissionPolicy")],
        None,
        vec![],
    );
    let port = Some(floor.addr.port());
    let floor_v = add("floor: validating", vec![Sign::FloorCalls(1)], port, vec![]);
    let floor_m = add(
        "floor: mutating, no patch",
        vec![Sign::FloorCalls(1)],
        port,
        vec![],
    );
    let floor_mp = add(
        "floor: mutating, same patch",
        vec![Sign::FloorCalls(1), Sign::Stamps],
        port,
        vec![],
    );
    let floor_b = add(
        "floor: both",
        vec![Sign::FloorCalls(2), Sign::Stamps],
        port,
        vec![],
    );
    let actix_port = Some(actix_floor.port());
    let actix_v = add(
        "floor on actix: validating",
        vec![Sign::FloorCalls(1)],
        actix_port,
        vec![floor_v],
    );
    let actix_mp = add(
        "floor on actix: mutating, patch",
        vec![Sign::FloorCalls(1), Sign::Stamps],
        actix_port,
        vec![floor_mp],
    );
    let mut ours = Vec::new();
    for ((_, name), webhook) in programs.iter().zip(&webhooks) {
        let port = Some(webhook.addr.port());
        let v = add(
            &format!("{name} validating"),
            vec![Sign::Denies("validate.bsl-sentinel.velero.io")],
            port,
            vec![floor_v, actix_v],
        );
        let m = add(
            &format!("{name} mutating"),
            vec![Sign::Stamps],
            port,
            vec![floor_mp, actix_mp],
        );
        let b = add(
            &format!("{name} both"),
            vec![
                Sign::Denies("validate.bsl-sentinel.velero.io"),
                Sign::Stamps,
            ],
            port,
            vec![floor_b],
        );
        ours.push((webhook.addr, v, m, b));
    }

    // Registration: the CEL policy bound by label, each webhook from webhook-config/.
    let policy = repo_root().join("tests/bench/cel-policy.yaml");
    kubectl.ok(&["apply", "-f", &policy.to_string_lossy()]);
    kubectl.ok(&[
        "label",
        "namespace",
        &scenarios[cel].ns,
        "bsl-sentinel.io/cel-policy=on",
    ]);
    let same = |p: &str| p.to_string();
    let patched = |_: &str| "/mutate-patch".to_string();
    let (v, m) = ("validating.yaml", "mutating.yaml");
    register(&kubectl, &scenarios[floor_v].ns, v, floor.addr, &same, &ca);
    register(&kubectl, &scenarios[floor_m].ns, m, floor.addr, &same, &ca);
    register(
        &kubectl,
        &scenarios[floor_mp].ns,
        m,
        floor.addr,
        &patched,
        &ca,
    );
    register(&kubectl, &scenarios[floor_b].ns, v, floor.addr, &same, &ca);
    register(
        &kubectl,
        &scenarios[floor_b].ns,
        m,
        floor.addr,
        &patched,
        &ca,
    );
    register(&kubectl, &scenarios[actix_v].ns, v, actix_floor, &same, &ca);
    register(
        &kubectl,
        &scenarios[actix_mp].ns,
        m,
        actix_floor,
        &patched,
        &ca,
    );
    for (addr, sv, sm, sb) in &ours {
        register(&kubectl, &scenarios[*sv].ns, v, *addr, &same, &ca);
        register(&kubectl, &scenarios[*sm].ns, m, *addr, &same, &ca);
        register(&kubectl, &scenarios[*sb].ns, v, *addr, &same, &ca);
        register(&kubectl, &scenarios[*sb].ns, m, *addr, &same, &ca);
    }
    let apis: Vec<_> = scenarios.iter().map(|s| api(&client, &s.ns)).collect();
    for (scenario, api) in scenarios.iter().zip(&apis) {
        wait_in_force(api, scenario, &floor).await;
    }
    println!(
        "BSL creates through the real apiserver, {} cores: {sequential} one at a time and \
         {concurrent} {CONCURRENCY} at once per admission and round, {rounds} rounds, one at a time create by create in turn",
        cores()
    );
    println!(
        "the CEL policy denied BSLs broken at {}, as the rules do",
        broken().map(|(_, f)| f).join(" and ")
    );

    // Linux keeps 15 bytes of a thread's name: actix's workers and acceptor.
    let actix = || threads_cpu_secs("actix-server wo") + threads_cpu_secs("actix-server ac");
    let mut meters = vec![
        Meter {
            name: "floor".into(),
            cpu: Box::new(|| threads_cpu_secs("floor")),
        },
        Meter {
            name: "floor on actix".into(),
            cpu: Box::new(actix),
        },
    ];
    for ((_, name), webhook) in programs.iter().zip(&webhooks) {
        let pid = webhook.sentinel.pid();
        meters.push(Meter {
            name: name.clone(),
            cpu: Box::new(move || process_cpu_secs(pid)),
        });
    }
    let mut samples: Vec<Samples> = scenarios.iter().map(|_| Samples::default()).collect();
    let accepted_before = floor.accepted.load(Ordering::Relaxed);
    for round in 0..rounds {
        let counts = (sequential, concurrent);
        run_round(
            plane,
            &meters,
            (&apis, &scenarios),
            round,
            counts,
            &mut samples,
        )
        .await;
        eprintln!("round {} of {rounds} done", round + 1);
    }
    report(&scenarios, none, &meters, &mut samples);
    println!(
        "the floor accepted {} TLS connections in all the rounds",
        floor.accepted.load(Ordering::Relaxed) - accepted_before
    );
}
