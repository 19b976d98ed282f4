//! Test support: the real control plane, kubectl, and the repository's peer scripts.

pub mod control_plane;
pub mod faults;
pub mod forward_proxy;
pub mod https;
pub mod pki;
pub mod sentinel;
pub mod storage;
pub mod velero;
pub mod webhook;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use control_plane::{ControlPlane, Crd};

/// Polls `check` every 100 ms until it gives a value; after `timeout`, fails the test with
/// `what` and what `check` last said was missing (formatted only then). It sleeps on tokio's
/// timer, so the servers the test runs in its runtime keep serving while it waits.
pub async fn eventually<T, E, Fut>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Fut,
) -> T
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let missing = match check().await {
            Ok(value) => return value,
            Err(missing) => missing,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}: {missing}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGTERM to a child process, as the kubelet stops a pod (and as nginx's master wants, to
/// stop its workers with it); returns at once.
pub fn sigterm(child: &Child) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return;
    };
    // SAFETY: kill(2) on a child the caller spawned and still owns.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

/// The checkout the tests run from. Cargo sets CARGO_MANIFEST_DIR when it runs a test or an
/// example, and that comes first: a binary built in another checkout sharing the target
/// directory (CI's clone and a working tree both use $HOME/.cache) is reused by cargo as
/// fresh, and its compile-time path may no longer exist.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// Runs one of the repository's scripts and returns the last line it printed on stdout
/// (the scripts print progress on stderr, which the test log shows).
pub fn run_script(script: &str) -> String {
    script_stdout(script)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// What one of the repository's scripts printed on stdout; fails the test when it fails.
fn script_stdout(script: &str) -> String {
    let out = Command::new("bash")
        .arg(repo_root().join(script))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{script} failed: {stdout}");
    stdout
}

/// Runs one of the repository's peer scripts that print `key=value` lines on stdout, and
/// returns the paths for `keys`, in order (the last line for a key counts).
pub fn script_fields<const N: usize>(script: &str, keys: [&str; N]) -> [PathBuf; N] {
    let stdout = script_stdout(script);
    keys.map(|key| {
        stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("{script} printed no {key}=: {stdout}"))
    })
}

pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// The real kubectl of the same release, bound to one control plane.
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    pub fn new(bin: &Path, kubeconfig: &Path) -> Self {
        Kubectl {
            bin: bin.to_path_buf(),
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Output {
        use std::io::Write;
        let mut child = Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        if let Some(mut input) = child.stdin.take() {
            input
                .write_all(stdin.as_bytes())
                .unwrap_or_else(|e| panic!("kubectl stdin: {e}"));
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        Output {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with_stdin(args, "")
    }

    /// Runs kubectl and fails the test, with its stderr, when it fails.
    pub fn ok(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(out.success, "kubectl {args:?} failed: {}", out.stderr);
        out
    }

    /// `kubectl apply -f -` of a manifest.
    pub fn apply(&self, namespace: &str, manifest: &str) -> Output {
        self.run_with_stdin(&["apply", "-n", namespace, "-f", "-"], manifest)
    }
}
