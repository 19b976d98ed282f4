//! `--external`: the release binary alone in its own process (`serve --reconciler=false`, as the
//! README's webhook-only mode runs it, against a real apiserver), beside a floor server that
//! answers the same bytes: nginx returning bsl-sentinel's own answer from its config, with the
//! same certificate and worker count. In the same run: wrk (an external load generator) at
//! saturation against each, two alternating rounds; this bench's open-loop client at fixed
//! rates against each; and with `--callgrind N`, both servers under valgrind's callgrind,
//! counting the instructions one review costs (stable where timings are not), with where
//! bsl-sentinel's go.
//!
//! A third server runs in the same rounds: this bench's own process serving bsl-sentinel's
//! answer as canned bytes on the same HTTP stack (`webhook::server`: actix-web over rustls),
//! so that what bsl-sentinel costs beyond it is its handler's.
//!
//! Needs Debian's `wrk`, `nginx-light` and `valgrind` packages (apt-get install wrk nginx-light
//! valgrind); the bench is run by hand, never by CI.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::support::control_plane::{free_port, spawn};
use crate::support::sentinel::binary;
use crate::support::webhook::SecretMount;
use crate::support::{ControlPlane, Crd, https};
use bytes::Bytes;

use super::{report, run};

/// One server under test: its process, address and log.
struct Server {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Server {
    /// SIGTERM first: nginx's master stops its workers on it, where SIGKILL left them running.
    fn drop(&mut self) {
        crate::support::sigterm(&self.child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Setup {
    pub connections: usize,
    pub seconds: u64,
    pub workers: usize,
    pub body: Bytes,
    pub request: Bytes,
    pub callgrind: Option<usize>,
}

fn sentinel_command(
    plane: &ControlPlane,
    mount: &SecretMount,
    addr: SocketAddr,
    workers: usize,
    prefix: &[String],
) -> Command {
    let (program, args) = match prefix.split_first() {
        Some((p, rest)) => (
            PathBuf::from(p),
            [rest, &[binary().display().to_string()]].concat(),
        ),
        None => (binary(), vec![]),
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("KUBECONFIG", &plane.kubeconfig)
        .env("RUST_LOG", super::measure::log_level())
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .args(["serve", "--reconciler=false", "--namespace", "velero"])
        .args(["--identity", "bench"])
        .args(["--admin-addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--webhook-addr", &addr.to_string()])
        .args(["--webhook-workers", &workers.to_string()])
        .arg("--tls-cert")
        .arg(mount.cert())
        .arg("--tls-key")
        .arg(mount.key());
    cmd
}

fn nginx_command(
    dir: &Path,
    addr: SocketAddr,
    workers: usize,
    answer: &str,
    solo: bool,
) -> Command {
    // nginx's `return` text is a quoted string with variables: the answer (JSON from serde)
    // must carry neither to be served byte for byte.
    assert!(
        !answer.contains(['\'', '\\', '$']),
        "the answer needs quoting for nginx: {answer}"
    );
    let (tls, conf) = (dir.join("tls"), dir.join("nginx.conf"));
    // Under valgrind, one process that serves (no master), so the counts are the server's.
    let processes = if solo {
        "master_process off;".to_string()
    } else {
        format!("worker_processes {workers};")
    };
    let text = format!(
        "daemon off;\n{processes}\npid {pid};\nerror_log {log} warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {tmp};\n  keepalive_requests 100000000;\n  keepalive_timeout 600s;\n\
           server {{\n    listen {addr} ssl;\n    ssl_certificate {tls}/tls.crt;\n    ssl_certificate_key {tls}/tls.key;\n\
             location = /validate {{ default_type application/json; return 200 '{answer}'; }}\n  }}\n}}\n",
        pid = dir.join("nginx.pid").display(),
        log = dir.join("nginx-error.log").display(),
        tmp = dir.join("nginx-body").display(),
        tls = tls.display(),
    );
    std::fs::write(&conf, text).unwrap_or_else(|e| panic!("{}: {e}", conf.display()));
    let mut cmd = Command::new("nginx");
    cmd.arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf)
        .args(["-e", "stderr"]);
    cmd
}

/// The canned server: `--canned-server ADDR CERT KEY ANSWER_FILE WORKERS`, run by
/// `canned_command` in a process of its own.
pub async fn canned_server(args: &[String]) {
    use actix_web::{HttpResponse, web};
    let [addr, cert, key, answer, workers] = args else {
        panic!("--canned-server ADDR CERT KEY ANSWER_FILE WORKERS, got {args:?}");
    };
    let answer = Bytes::from(std::fs::read(answer).unwrap_or_else(|e| panic!("{answer}: {e}")));
    let workers: usize = workers.parse().unwrap_or_else(|e| panic!("{workers}: {e}"));
    let cert = bsl_sentinel::tls::ReloadingCert::load(Path::new(cert), Path::new(key))
        .unwrap_or_else(|e| panic!("certificate: {e}"));
    let tls = cert.server_config().unwrap_or_else(|e| panic!("TLS: {e}"));
    let listener = std::net::TcpListener::bind(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    // bsl-sentinel's stack, with a handler that reads the body as bsl-sentinel's does
    // (web::Bytes) and answers the same bytes.
    let configure = move |cfg: &mut web::ServiceConfig| {
        let answer = answer.clone();
        let canned = move |_: web::Bytes| {
            let answer = answer.clone();
            async move {
                HttpResponse::Ok()
                    .content_type("application/json")
                    .body(answer)
            }
        };
        cfg.route("/validate", web::post().to(canned));
    };
    let server = bsl_sentinel::webhook::server(listener, tls, workers, configure)
        .unwrap_or_else(|e| panic!("canned server: {e}"));
    server
        .await
        .unwrap_or_else(|e| panic!("canned server: {e}"));
}

fn canned_command(
    dir: &Path,
    mount: &SecretMount,
    addr: SocketAddr,
    workers: usize,
    answer: &str,
    prefix: &[String],
) -> Command {
    let file = dir.join("canned-answer.json");
    std::fs::write(&file, answer).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let (program, args) = match prefix.split_first() {
        Some((p, rest)) => (
            PathBuf::from(p),
            [rest, &[exe.display().to_string()]].concat(),
        ),
        None => (exe, vec![]),
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg("--canned-server")
        .arg(addr.to_string())
        .arg(mount.cert())
        .arg(mount.key())
        .arg(&file)
        .arg(workers.to_string());
    cmd
}

fn start(cmd: Command, addr: SocketAddr, log: PathBuf) -> Server {
    Server {
        child: spawn(cmd, &log),
        addr,
        log,
    }
}

/// Posts the review until the server answers it allowed (the webhook admits only once its
/// caches have synced); the answer's body.
async fn answered(server: &Server, ca: &str, body: &Bytes, within: Duration) -> Bytes {
    let tls = https::client_config(ca);
    let start = Instant::now();
    loop {
        if let Ok(mut conn) = https::connect(server.addr, tls.clone()).await
            && let Ok((200, answer)) = conn.request("POST", "/validate", body.clone()).await
            && answer.windows(14).any(|w| w == br#""allowed":true"#)
        {
            return answer;
        }
        if start.elapsed() > within {
            let log = std::fs::read_to_string(&server.log).unwrap_or_default();
            panic!(
                "no allowed answer from {} in {within:?}:\n{log}",
                server.addr
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// wrk at saturation: requests per second (every answer must be a 2xx).
fn wrk(addr: SocketAddr, dir: &Path, connections: usize, seconds: u64, body: &Bytes) -> f64 {
    let script = dir.join("post.lua");
    let body = String::from_utf8_lossy(body);
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = [==[{body}]==]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{connections}"), &format!("-d{seconds}s")])
        .arg("-s")
        .arg(&script)
        .arg(format!("https://{addr}/validate"))
        .output()
        .unwrap_or_else(|e| panic!("wrk (apt-get install wrk): {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !text.contains("Non-2xx") && !text.contains("Socket errors"),
        "wrk against {addr}:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk's output:\n{text}"))
}

pub async fn main(setup: Setup) {
    let (connections, seconds, workers) = (setup.connections, setup.seconds, setup.workers);
    let (body, request) = (&setup.body, &setup.request);
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    kubectl.ok(&["create", "namespace", "velero"]);
    kubectl.ok(&[
        "-n",
        "velero",
        "create",
        "secret",
        "generic",
        "cloud-credentials",
        "--from-literal=cloud=[default]",
    ]);
    let dir = plane.dir.join("bench-webhook");
    let mount = SecretMount::new(&dir.join("tls"));
    let ca = mount.ca.cert_pem();
    std::fs::create_dir_all(dir.join("nginx-body")).unwrap_or_else(|e| panic!("{e}"));

    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let sentinel = start(
        sentinel_command(plane, &mount, addr, workers, &[]),
        addr,
        dir.join("sentinel.log"),
    );
    let answer = answered(&sentinel, &ca, body, Duration::from_secs(30)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let nginx = start(
        nginx_command(&dir, addr, workers, &answer, false),
        addr,
        dir.join("nginx.log"),
    );
    let floor = answered(&nginx, &ca, body, Duration::from_secs(10)).await;
    assert_eq!(floor, answer.as_bytes(), "nginx answers other bytes");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let canned = start(
        canned_command(&dir, &mount, addr, workers, &answer, &[]),
        addr,
        dir.join("canned.log"),
    );
    let same = answered(&canned, &ca, body, Duration::from_secs(10)).await;
    assert_eq!(
        same,
        answer.as_bytes(),
        "the canned server answers other bytes"
    );
    println!(
        "bsl-sentinel alone (release binary, serve --reconciler=false) beside nginx and actix-web (canned) answering its {} byte answer; {workers} worker(s) each, {connections} connections, {seconds}s per step",
        answer.len()
    );
    for round in 1..=2 {
        let ours = wrk(sentinel.addr, &dir, connections, seconds, body);
        let stack = wrk(canned.addr, &dir, connections, seconds, body);
        let theirs = wrk(nginx.addr, &dir, connections, seconds, body);
        println!(
            "wrk round {round}   bsl-sentinel {ours:>8.0} reviews/s  actix-canned {stack:>8.0}/s  nginx {theirs:>8.0}/s  ratios {:.2} and {:.2} of nginx, {:.2} of actix-canned",
            ours / theirs,
            stack / theirs,
            ours / stack
        );
    }
    for rate in [5_000.0, 10_000.0] {
        let servers = [
            ("bsl-sentinel", &sentinel),
            ("actix-canned", &canned),
            ("nginx", &nginx),
        ];
        for (name, server) in servers {
            let r = run(
                server.addr,
                &ca,
                connections,
                Some(rate),
                seconds,
                request.clone(),
            )
            .await;
            report(&format!("{name} {rate:.0}/s"), r);
        }
    }
    drop((sentinel, canned, nginx));
    if let Some(n) = setup.callgrind {
        instructions(plane, &mount, &dir, workers, &answer, (body, request), n).await;
    }
}

/// Both servers under callgrind: counters zeroed once the connections are up, `n` reviews
/// sent, counters dumped; instructions per review, and bsl-sentinel's by where they go.
async fn instructions(
    plane: &ControlPlane,
    mount: &SecretMount,
    dir: &Path,
    workers: usize,
    answer: &str,
    (body, request): (&Bytes, &Bytes),
    n: usize,
) {
    let ca = mount.ca.cert_pem();
    let mut per_review = Vec::new();
    for name in ["bsl-sentinel", "actix-canned", "nginx"] {
        let out = dir.join(format!("callgrind.{name}"));
        let prefix = vec![
            "valgrind".to_string(),
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}", out.display()),
        ];
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = dir.join(format!("{name}-callgrind.log"));
        let cmd = match name {
            "nginx" => {
                let mut cmd = Command::new("valgrind");
                let nginx = nginx_command(dir, addr, workers, answer, true);
                cmd.args(&prefix[1..])
                    .arg(nginx.get_program())
                    .args(nginx.get_args());
                cmd
            }
            "actix-canned" => canned_command(dir, mount, addr, workers, answer, &prefix),
            _ => sentinel_command(plane, mount, addr, workers, &prefix),
        };
        let server = start(cmd, addr, log);
        answered(&server, &ca, body, Duration::from_secs(120)).await;
        let tls = https::client_config(&ca);
        let mut conn = super::RawConn::connect(addr, tls)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let pid = server.child.id().to_string();
        callgrind_control(&["--zero", &pid]);
        for _ in 0..n {
            let status = conn
                .round_trip(request)
                .await
                .unwrap_or_else(|e| panic!("request: {e}"));
            assert_eq!(status, 200, "bad answer under callgrind");
        }
        callgrind_control(&["--dump", &pid]);
        let dump = PathBuf::from(format!("{}.1", out.display()));
        let total = annotate(&dump, n, name == "bsl-sentinel");
        println!(
            "callgrind {name:>12}  {:>9.0} instructions per review",
            total
        );
        // Kept past the run's temporary directory, for the callers of what costs most.
        let kept = std::env::temp_dir().join(format!("bench-webhook.callgrind.{name}"));
        if std::fs::copy(&dump, &kept).is_ok() {
            println!(
                "callgrind {name:>12}  callgrind_annotate --inclusive=yes --tree=caller {}",
                kept.display()
            );
        }
        per_review.push(total);
        drop(server);
    }
    if let [ours, stack, theirs] = per_review[..] {
        println!(
            "callgrind    bsl-sentinel {:.2}x nginx's instructions per review, actix-canned {:.2}x; bsl-sentinel's handler {:.0} per review",
            ours / theirs,
            stack / theirs,
            ours - stack
        );
    }
}

fn callgrind_control(args: &[&str]) {
    let out = Command::new("callgrind_control")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("callgrind_control (apt-get install valgrind): {e}"));
    assert!(
        out.status.success(),
        "callgrind_control {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Instructions per review in a dump; with `detail`, where they go: by crate (exclusive
/// counts), then the costliest functions.
fn annotate(dump: &Path, n: usize, detail: bool) -> f64 {
    let out = Command::new("callgrind_annotate")
        .args(["--inclusive=no", "--threshold=100"])
        .arg(dump)
        .output()
        .unwrap_or_else(|e| panic!("callgrind_annotate: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |line: &str| -> Option<u64> {
        line.split_whitespace()
            .next()
            .and_then(|c| c.replace(',', "").parse().ok())
    };
    let total = text
        .lines()
        .find(|l| l.contains("PROGRAM TOTALS"))
        .and_then(count)
        .unwrap_or_else(|| panic!("no totals in {}:\n{text}", dump.display()));
    if detail {
        let mut by_crate: BTreeMap<String, u64> = BTreeMap::new();
        let mut functions = Vec::new();
        for line in text.lines() {
            // "  43,600 (26.4%)  ???:serde_json::de::... [/path/object]"
            let Some((ir, rest)) = count(line).zip(line.split_once(")  ")) else {
                continue;
            };
            let Some((_, name)) = rest.1.split_once(':') else {
                continue;
            };
            let name = name.split(" [").next().unwrap_or(name).trim();
            // Thread entry frames come out with their callees' cost: not a place time goes.
            if ir * 100 >= total * 95 {
                continue;
            }
            by_crate
                .entry(group(name, rest.1))
                .and_modify(|c| *c += ir)
                .or_insert(ir);
            functions.push((ir, name.to_string()));
        }
        let mut crates: Vec<_> = by_crate.into_iter().collect();
        crates.sort_by_key(|c| std::cmp::Reverse(c.1));
        for (name, ir) in crates.iter().take(10) {
            println!(
                "  {name:<28} {:>5.1}%  {:>7.0} per review",
                *ir as f64 * 100.0 / total as f64,
                *ir as f64 / n as f64
            );
        }
        for (ir, name) in functions.iter().take(12) {
            println!(
                "    {:>5.1}%  {}",
                *ir as f64 * 100.0 / total as f64,
                name.chars().take(110).collect::<String>()
            );
        }
    }
    total as f64 / n as f64
}

/// A function's group: its crate, or for C code, the library and what it does.
fn group(name: &str, line: &str) -> String {
    if line.contains("libc.so") || line.contains("ld-linux") {
        let what = if name.contains("mem") {
            "memcpy/memset/memmove"
        } else {
            "malloc/free and the rest"
        };
        return format!("glibc {what}");
    }
    let name = name
        .trim_start_matches(['<', '&'])
        .trim_start_matches("mut ");
    match name.split_once("::") {
        Some((krate, _)) if ["core", "alloc", "std"].contains(&krate) => "Rust std".into(),
        Some((krate, _)) => krate.into(),
        None => name.chars().take(28).collect(),
    }
}
