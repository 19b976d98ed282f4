//! A real local control plane for tests: etcd and kube-apiserver v1.37.2 built from Go modules
//! (tests/peers/build-kube.sh), on free 127.0.0.1 ports, with fresh certificates, RBAC and an
//! admin kubeconfig.
//!
//! One etcd serves two apiservers under different prefixes, because Velero's CRD and the
//! project's CRD share a name: `ControlPlane::get(Crd::Velero)` and `ControlPlane::get(Crd::Project)`
//! each have theirs installed. Tests share them and isolate by namespace.
//!
//! Teardown: the processes are started from a thread that lives as long as the test binary and
//! get PR_SET_PDEATHSIG, so they die with it even when a test panics or the binary is killed;
//! an atexit hook stops them and removes the temporary folder on a normal exit.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use super::pki::Ca;

use super::{Kubectl, run_script};

/// The release tests/peers/kube pins.
const KUBE_VERSION: &str = "v1.37.2";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crd {
    /// Velero v1.18's own CRD: phase Available|Unavailable, no status subresource.
    Velero,
    /// `bsl-sentinel crd`.
    Project,
    /// `bsl-sentinel crd` with a status subresource, as a future CRD might add.
    WithStatusSubresource,
}

pub struct ControlPlane {
    pub server: String,
    pub kubeconfig: PathBuf,
    pub bin: PathBuf,
    /// Where tests may write files; removed at exit.
    pub dir: PathBuf,
}

struct Shared {
    root: PathBuf,
    bin: PathBuf,
    etcd: String,
    children: Vec<Child>,
}

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);
static VELERO: OnceLock<ControlPlane> = OnceLock::new();
static PROJECT: OnceLock<ControlPlane> = OnceLock::new();
static WITH_STATUS: OnceLock<ControlPlane> = OnceLock::new();

impl ControlPlane {
    pub fn get(crd: Crd) -> &'static ControlPlane {
        let cell = match crd {
            Crd::Velero => &VELERO,
            Crd::Project => &PROJECT,
            Crd::WithStatusSubresource => &WITH_STATUS,
        };
        cell.get_or_init(|| start_apiserver(crd))
    }

    pub fn kubectl(&self) -> Kubectl {
        Kubectl::new(&self.bin.join("kubectl"), &self.kubeconfig)
    }

    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.kubeconfig.display()));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
        kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
    }

    /// A copy of the admin kubeconfig naming another server (`https://host:port`, e.g. a
    /// proxy's or a link's port), with `extra` lines added to the cluster (such as
    /// `tls-server-name: localhost`).
    pub fn kubeconfig_for(&self, name: &str, server: &str, extra: &str) -> PathBuf {
        let text = std::fs::read_to_string(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.kubeconfig.display()));
        let cluster = match extra {
            "" => format!("    server: {server}"),
            extra => format!("    server: {server}\n    {extra}"),
        };
        let text = text.replace(&format!("    server: {}", self.server), &cluster);
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// A fresh namespace for one test.
    pub fn namespace(&self, prefix: &str) -> String {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}-{n}");
        self.kubectl().ok(&["create", "namespace", &name]);
        name
    }
}

/// A free 127.0.0.1 port below Linux's ephemeral range (32768 and up), so that a server
/// restarted on the same port never finds it taken by some client's outgoing connection.
/// Between the check and the peer's own bind the port stays free only if no one else picks
/// it: never twice in this process (a counter), and never in another test process at once (a
/// lock on the port's file, held until this process ends; the kernel drops it even on a
/// crash, so nothing goes stale).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    // Spread by process, so test binaries running at once rarely probe the same ports.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let locks = std::env::temp_dir().join("bsl-sentinel-ports");
    std::fs::create_dir_all(&locks).unwrap_or_else(|e| panic!("{}: {e}", locks.display()));
    let start = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    for _ in 0..SPAN {
        let port = LOW + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(port).unwrap_or_else(|_| unreachable!("below 32000"));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(locks.join(port.to_string()));
        let Ok(lock) = lock else { continue };
        if lock.try_lock().is_ok() && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 between {LOW} and {}", LOW + SPAN)
}

/// Runs `f` on a thread that outlives every test, so that PR_SET_PDEATHSIG (which fires when
/// the spawning thread exits) kills the children only when the test binary ends.
fn on_keeper_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    type Job = Box<dyn FnOnce() + Send>;
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let sender = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for job in rx {
                job();
            }
            loop {
                std::thread::park();
            }
        });
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    let job = Box::new(move || {
        let _ = tx.send(f());
    });
    sender
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(job)
        .unwrap_or_else(|_| panic!("keeper thread is gone"));
    rx.recv()
        .unwrap_or_else(|_| panic!("keeper thread dropped a job"))
}

pub fn spawn(mut cmd: Command, log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let err = out
        .try_clone()
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let program = format!("{:?}", cmd.get_program());
    on_keeper_thread(move || cmd.spawn()).unwrap_or_else(|e| panic!("spawning {program}: {e}"))
}

/// Keeps a child for teardown at exit.
pub fn adopt(child: Child) {
    if let Some(shared) = SHARED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        shared.children.push(child);
    }
}

extern "C" fn teardown() {
    let Ok(mut guard) = SHARED.lock() else { return };
    if let Some(shared) = guard.as_mut() {
        for child in &mut shared.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&shared.root);
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

pub fn wait_for(what: &str, log: &Path, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > timeout {
            panic!(
                "{what} not ready after {timeout:?}; last log lines:\n{}",
                tail(log)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts etcd once per test binary and returns what the apiservers need from it.
fn with_shared<T>(f: impl FnOnce(&mut Shared) -> T) -> T {
    let mut guard = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        *guard = Some(start_etcd());
        // SAFETY: registering a plain extern "C" fn with no captured state.
        #[allow(unsafe_code)]
        unsafe {
            libc::atexit(teardown)
        };
    }
    match guard.as_mut() {
        Some(shared) => f(shared),
        None => unreachable!("set just above"),
    }
}

fn start_etcd() -> Shared {
    let bin = PathBuf::from(match std::env::var_os("BSL_SENTINEL_KUBE_BIN") {
        Some(dir) => dir.to_string_lossy().into_owned(),
        None => run_script("tests/peers/build-kube.sh"),
    });
    let root = scratch_root();
    let (mut etcd, url) = etcd_process(&bin, &root);
    Shared {
        root,
        bin,
        etcd: url,
        children: etcd.child.take().into_iter().collect(),
    }
}

/// etcd on two free ports with its data under `root`, started and answering.
fn etcd_process(bin: &Path, root: &Path) -> (Process, String) {
    let (client, peer) = (free_port(), free_port());
    let etcd = format!("http://127.0.0.1:{client}");
    let mut cmd = Command::new(bin.join("etcd"));
    cmd.arg(format!("--data-dir={}", root.join("etcd").display()))
        .arg(format!("--listen-client-urls={etcd}"))
        .arg(format!("--advertise-client-urls={etcd}"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
        ))
        .arg(format!("--initial-cluster=default=http://127.0.0.1:{peer}"))
        .arg("--unsafe-no-fsync=true")
        .arg("--log-level=warn");
    let mut process = Process::new(&cmd, &root.join("etcd.log"));
    process.start();
    let health = format!("127.0.0.1:{client}");
    wait_for("etcd", &process.log, Duration::from_secs(30), || {
        std::net::TcpStream::connect(&health).is_ok()
    });
    (process, etcd)
}

/// A server process that can be killed and started again with the same command line.
pub struct Process {
    program: std::ffi::OsString,
    args: Vec<std::ffi::OsString>,
    pub log: PathBuf,
    child: Option<Child>,
    starts: usize,
}

impl Process {
    fn new(cmd: &Command, log: &Path) -> Process {
        Process {
            program: cmd.get_program().to_os_string(),
            args: cmd.get_args().map(|a| a.to_os_string()).collect(),
            log: log.to_path_buf(),
            child: None,
            starts: 0,
        }
    }

    /// Starts it; each restart logs to a file of its own (`x.log`, `x.log.1`, ...).
    pub fn start(&mut self) {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        let log = match self.starts {
            0 => self.log.clone(),
            n => PathBuf::from(format!("{}.{n}", self.log.display())),
        };
        self.starts += 1;
        self.child = Some(spawn(cmd, &log));
    }

    /// SIGKILL, as a crash or a node loss.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A folder for this test binary under the system temp dir; folders of earlier runs whose
/// process is gone (killed before its atexit hook ran) are removed.
fn scratch_root() -> PathBuf {
    let base = std::env::temp_dir().join("bsl-sentinel-tests");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !Path::new("/proc").join(&pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let root = base.join(std::process::id().to_string());
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    root
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn start_apiserver(crd: Crd) -> ControlPlane {
    let (root, bin, etcd) = with_shared(|s| (s.root.clone(), s.bin.clone(), s.etcd.clone()));
    let (plane, mut process) = apiserver_process(crd, &root, &bin, &etcd);
    if let Some(child) = process.child.take() {
        adopt(child);
    }
    plane
}

/// A control plane of one test's own, whose etcd and kube-apiserver it can kill and start again
/// (same ports, same data), as in a crash or an upgrade.
pub struct Restartable {
    pub plane: ControlPlane,
    pub etcd: Process,
    pub apiserver: Process,
}

impl Restartable {
    pub fn start(crd: Crd) -> Restartable {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let bin = with_shared(|s| s.bin.clone());
        let root = with_shared(|s| s.root.join(format!("own-{n}")));
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        let (etcd, url) = etcd_process(&bin, &root);
        let (plane, apiserver) = apiserver_process(crd, &root, &bin, &url);
        Restartable {
            plane,
            etcd,
            apiserver,
        }
    }

    /// Waits until the apiserver answers /readyz again.
    pub fn wait_ready(&self) {
        let kubectl = self.plane.kubectl();
        wait_for(
            "kube-apiserver",
            &self.apiserver.log,
            Duration::from_secs(60),
            || kubectl.run(&["get", "--raw", "/readyz"]).success,
        );
    }
}

fn apiserver_process(crd: Crd, root: &Path, bin: &Path, etcd: &str) -> (ControlPlane, Process) {
    let bin = bin.to_path_buf();
    let name = match crd {
        Crd::Velero => "velero",
        Crd::Project => "project",
        Crd::WithStatusSubresource => "with-status",
    };
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));

    let serving_ca =
        Ca::new("apiserver serving CA").unwrap_or_else(|e| panic!("certificates: {e}"));
    let serving = serving_ca
        .issue_server(&["localhost"], &[Ipv4Addr::LOCALHOST.into()])
        .unwrap_or_else(|e| panic!("certificates: {e}"));
    let client_ca = Ca::new("apiserver client CA").unwrap_or_else(|e| panic!("certificates: {e}"));
    let admin = client_ca
        .issue_client("admin", &["system:masters"])
        .unwrap_or_else(|e| panic!("certificates: {e}"));
    let sa = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("certificates: {e}"));
    let files = [
        ("serving.crt", serving.cert.clone()),
        ("serving.key", serving.key.clone()),
        ("client-ca.crt", client_ca.cert_pem()),
        ("sa.key", sa.serialize_pem()),
        ("sa.pub", sa.public_key_pem()),
    ];
    for (file, text) in &files {
        write(&dir.join(file), text);
    }

    let port = free_port();
    let server = format!("https://127.0.0.1:{port}");
    let log = dir.join("kube-apiserver.log");
    let path = |f: &str| dir.join(f).display().to_string();
    let mut cmd = Command::new(bin.join("kube-apiserver"));
    cmd.arg(format!("--etcd-servers={etcd}"))
        .arg(format!("--etcd-prefix=/{name}"))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--tls-cert-file={}", path("serving.crt")))
        .arg(format!("--tls-private-key-file={}", path("serving.key")))
        .arg(format!("--client-ca-file={}", path("client-ca.crt")))
        .arg("--authorization-mode=RBAC")
        .arg("--service-cluster-ip-range=10.0.0.0/24")
        .arg("--allow-privileged=true")
        .arg("--disable-admission-plugins=ServiceAccount")
        .arg(format!("--service-account-issuer={server}/"))
        .arg(format!("--service-account-key-file={}", path("sa.pub")))
        .arg(format!(
            "--service-account-signing-key-file={}",
            path("sa.key")
        ))
        .arg("--endpoint-reconciler-type=none");
    let mut process = Process::new(&cmd, &log);
    process.start();

    let kubeconfig = dir.join("kubeconfig");
    write(
        &kubeconfig,
        &kubeconfig_yaml(&server, &serving_ca.cert_pem(), &admin.cert, &admin.key),
    );
    let plane = ControlPlane {
        server,
        kubeconfig,
        bin,
        dir,
    };
    let kubectl = plane.kubectl();
    wait_for("kube-apiserver", &log, Duration::from_secs(60), || {
        kubectl.run(&["get", "--raw", "/readyz"]).success
    });
    let version = kubectl.ok(&["version", "-o", "json"]);
    let version: serde_json::Value = serde_json::from_str(&version.stdout)
        .unwrap_or_else(|e| panic!("kubectl version -o json: {e}"));
    let (server_version, client_version) = (
        &version["serverVersion"]["gitVersion"],
        &version["clientVersion"]["gitVersion"],
    );
    eprintln!(
        "control plane ({name} CRD): kube-apiserver {server_version} and kubectl {client_version} at {}",
        plane.server
    );
    assert_eq!(
        server_version, KUBE_VERSION,
        "unexpected kube-apiserver version"
    );
    assert_eq!(client_version, KUBE_VERSION, "unexpected kubectl version");

    let crd_file = match crd {
        Crd::Velero => PathBuf::from(run_script("tests/peers/velero-crd.sh")),
        Crd::Project | Crd::WithStatusSubresource => {
            let mut manifest = serde_json::to_value(bsl_sentinel::crd::crd()).unwrap_or_default();
            if crd == Crd::WithStatusSubresource {
                manifest["spec"]["versions"][0]["subresources"] = serde_json::json!({"status": {}});
            }
            let file = plane.dir.join("crd.json");
            write(&file, &manifest.to_string());
            file
        }
    };
    kubectl.ok(&["apply", "-f", &crd_file.display().to_string()]);
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        &format!("crd/{}", bsl_sentinel::bsl::CRD_NAME),
    ]);
    (plane, process)
}

fn kubeconfig_yaml(server: &str, ca: &str, cert: &str, key: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority-data: {}
users:
- name: admin
  user:
    client-certificate-data: {}
    client-key-data: {}
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
",
        b64(ca),
        b64(cert),
        b64(key)
    )
}
