//! Webhook benchmark: drives /validate over TLS keep-alive on 127.0.0.1 with a realistic
//! (~2 KB) AdmissionReview, at fixed offered loads (open loop, latency measured from each
//! request's scheduled send time, so queueing counts) and at saturation (closed loop).
//!
//! cargo run --release --example bench-webhook -- [--connections 32] [--seconds 5] [--workers 2]
//! cargo build --release && cargo run --release --example bench-webhook -- --external [--callgrind 5000]
//!
//! `--print-body` prints the review it sends (for tests/bench/parsers).
//!
//! `--external` drives the release binary in its own process instead, beside nginx as the
//! floor and the same HTTP stack answering canned bytes (see webhook_external.rs).

#[allow(dead_code, unused_imports)]
#[path = "../integration/support/mod.rs"]
mod support;

#[path = "webhook_external.rs"]
mod external;

#[allow(dead_code)]
#[path = "measure.rs"]
mod measure;

use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use bsl_sentinel::admission::ClusterView;
use bsl_sentinel::tls::ReloadingCert;
use bsl_sentinel::webhook::{self, State};
use bytes::Bytes;
use measure::{count_arg, pct};
use serde_json::json;
use support::https;
use support::webhook::{SecretMount, review};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Cluster;

impl ClusterView for Cluster {
    fn defaults(&self, _: &str) -> Option<Vec<String>> {
        Some(vec!["primary".into()])
    }
    fn secret_exists(&self, _: &str, _: &str) -> Option<bool> {
        Some(true)
    }
}

/// A BSL as kubectl apply sends it: config, credential, labels, the last-applied annotation
/// and managedFields, wrapped in an AdmissionReview: about 2 KB.
fn body() -> Bytes {
    let spec = json!({
        "provider": "velero.io/aws",
        "default": true,
        "accessMode": "ReadWrite",
        "credential": {"name": "cloud-credentials", "key": "cloud"},
        "objectStorage": {"bucket": "velero-backups-eu-west-1", "prefix": "clusters/prod-eu-1"},
        "config": {"region": "eu-west-1", "s3ForcePathStyle": "true", "s3Url": "https://s3.eu-west-1.example.com", "checksumAlgorithm": "CRC32"},
        "backupSyncPeriod": "2m0s",
        "validationFrequency": "1m0s"
    });
    let mut object = support::webhook::bsl("prod-eu-1", spec.clone());
    object["metadata"]["labels"] =
        json!({"app.kubernetes.io/part-of": "velero", "team": "platform"});
    object["metadata"]["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration":
            json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "prod-eu-1", "namespace": "velero"}, "spec": spec}).to_string()
    });
    object["metadata"]["managedFields"] = json!([{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "velero.io/v1", "time": "2026-12-02T10:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}, "f:labels": {".": {}, "f:app.kubernetes.io/part-of": {}, "f:team": {}}},
                     "f:spec": {".": {}, "f:accessMode": {}, "f:backupSyncPeriod": {}, "f:config": {}, "f:credential": {}, "f:default": {}, "f:objectStorage": {}, "f:provider": {}, "f:validationFrequency": {}}}}]);
    Bytes::from(
        review(
            "3f1c2b7e-1b0e-4b9c-9a57-2d2b7e3c8f10",
            "CREATE",
            &object,
            None,
            false,
        )
        .to_string(),
    )
}

/// The load generator's own HTTP/1.1 client: pre-built request bytes, a minimal response
/// parse. It must cost the machine less than the server it measures (hyper's client cost
/// about twice what the webhook does per request on this 2-core machine).
struct RawConn {
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    buf: Vec<u8>,
}

impl RawConn {
    async fn connect(
        addr: std::net::SocketAddr,
        tls: std::sync::Arc<rustls::ClientConfig>,
    ) -> std::io::Result<RawConn> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await?;
        Ok(RawConn {
            stream,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Sends one request and reads one response; returns the status code.
    async fn round_trip(&mut self, request: &[u8]) -> std::io::Result<u16> {
        self.stream.write_all(request).await?;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        loop {
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
            let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while self.buf.len() < end + 4 + length {
                let n = self.stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                self.buf.extend_from_slice(&chunk[..n]);
            }
            return Ok(status);
        }
    }
}

/// Tokio's timers have millisecond granularity: sleep to just before the scheduled time, then
/// yield until it, so that the measured latency is the server's, not the timer's.
async fn wait_until(at: Instant) {
    if let Some(early) = at.checked_sub(Duration::from_millis(2))
        && early > Instant::now()
    {
        tokio::time::sleep_until(early.into()).await;
    }
    while Instant::now() < at {
        tokio::task::yield_now().await;
    }
}

struct Result {
    sent: usize,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

fn report(label: &str, mut r: Result) {
    r.latencies.sort();
    println!(
        "{label:>12}  {:>9.0} reviews/s  p50 {:>6.3} ms  p99 {:>6.3} ms  p999 {:>6.3} ms  ({} reviews)",
        r.latencies.len() as f64 / r.elapsed.as_secs_f64(),
        pct(&r.latencies, 0.50),
        pct(&r.latencies, 0.99),
        pct(&r.latencies, 0.999),
        r.sent
    );
}

/// `rate` None: closed loop, each connection sends as fast as answers come back.
async fn run(
    addr: std::net::SocketAddr,
    ca: &str,
    connections: usize,
    rate: Option<f64>,
    seconds: u64,
    request: Bytes,
) -> Result {
    let tls = https::client_config(ca);
    let start = Instant::now() + Duration::from_millis(200);
    let end = start + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..connections {
        let mut conn = RawConn::connect(addr, tls.clone())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            // Open loop: connection c sends at start + (c + k*connections) / rate.
            let interval = rate.map(|r| Duration::from_secs_f64(connections as f64 / r));
            let offset = rate
                .map(|r| Duration::from_secs_f64(c as f64 / r))
                .unwrap_or_default();
            let mut k = 0u32;
            loop {
                let scheduled = match interval {
                    Some(i) => start + offset + i * k,
                    None => Instant::now().max(start),
                };
                if scheduled >= end {
                    break;
                }
                wait_until(scheduled).await;
                let status = conn
                    .round_trip(&request)
                    .await
                    .unwrap_or_else(|e| panic!("request: {e}"));
                assert_eq!(status, 200, "bad answer");
                latencies.push(scheduled.elapsed());
                k += 1;
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap_or_default());
    }
    let elapsed = Instant::now().saturating_duration_since(start);
    Result {
        sent: latencies.len(),
        latencies,
        elapsed,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Some(at) = std::env::args().position(|a| a == "--canned-server") {
        let args: Vec<String> = std::env::args().skip(at + 1).collect();
        return external::canned_server(&args).await;
    }
    let connections = count_arg("--connections", 32);
    let seconds = count_arg("--seconds", 5) as u64;
    let workers = count_arg("--workers", 1);
    let body = body();
    let request = Bytes::from(
        [
            format!("POST /validate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes(),
            &body,
        ]
        .concat(),
    );
    if std::env::args().any(|a| a == "--print-body") {
        // For tests/bench/parsers, which times JSON parsers on the same review.
        return println!("{}", String::from_utf8_lossy(&body));
    }
    if std::env::args().any(|a| a == "--external") {
        let callgrind = std::env::args()
            .any(|a| a == "--callgrind")
            .then(|| count_arg("--callgrind", 5_000));
        return external::main(external::Setup {
            connections,
            seconds,
            workers,
            body,
            request,
            callgrind,
        })
        .await;
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mount = SecretMount::new(&dir.path().join("tls"));
    let cert = ReloadingCert::load(&mount.cert(), &mount.key()).unwrap_or_else(|e| panic!("{e}"));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap_or_else(|e| panic!("{e}"));
    let (server, addr) = webhook::serve(listener, &cert, State::new(Cluster), workers)
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(server);
    let ca = mount.ca.cert_pem();
    println!(
        "webhook /validate over TLS keep-alive, {} byte AdmissionReview, {connections} connections, {workers} server worker(s), {seconds}s per step, {} cores",
        body.len(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    // The decision alone, without HTTP or TLS: what one review costs the server.
    let n = 20_000;
    let t = Instant::now();
    for _ in 0..n {
        let request = bsl_sentinel::review::decode(&body).unwrap_or_else(|e| panic!("{e}"));
        let response = bsl_sentinel::admission::validate(&request, &Cluster);
        std::hint::black_box(serde_json::to_vec(&response.into_review()).unwrap_or_default());
    }
    println!(
        "{:>12}  {:>9.1} us per review (decode, rules, encode; no HTTP)",
        "handler",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    // Warm-up: TLS sessions, allocator, caches.
    let _ = run(addr, &ca, connections, None, 1, request.clone()).await;
    for rate in [1_000.0, 5_000.0, 10_000.0, 20_000.0] {
        let r = run(addr, &ca, connections, Some(rate), seconds, request.clone()).await;
        report(&format!("{rate:.0}/s"), r);
    }
    let r = run(addr, &ca, connections, None, seconds, request.clone()).await;
    report("saturation", r);
}
