//! The real Velero v1.18.3 (server and CLI) and velero-plugin-for-aws v1.14.3, built by
//! tests/peers/build-velero.sh. The server runs out of cluster against a test apiserver, one
//! per test namespace, with its metrics and profiler ports on 127.0.0.1.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use super::control_plane::{free_port, spawn, wait_for};
use super::{ControlPlane, Crd, Output, script_fields};

pub struct VeleroPeer {
    pub velero: PathBuf,
    pub plugins: PathBuf,
}

pub fn peer() -> &'static VeleroPeer {
    static PEER: OnceLock<VeleroPeer> = OnceLock::new();
    PEER.get_or_init(|| {
        let [velero, plugins] = script_fields("tests/peers/build-velero.sh", ["velero", "plugins"]);
        VeleroPeer { velero, plugins }
    })
}

/// Velero's CRDs as `velero install --crds-only` makes them, once per control plane. On the
/// project's plane its BSL CRD stays (the two share a name); on Velero's plane it is the same
/// CRD as the one already installed.
pub fn install_crds(plane: &'static ControlPlane, crd: Crd) {
    static VELERO: OnceLock<()> = OnceLock::new();
    static PROJECT: OnceLock<()> = OnceLock::new();
    let cell = match crd {
        Crd::Velero => &VELERO,
        _ => &PROJECT,
    };
    cell.get_or_init(|| {
        let out = cli(
            plane,
            "default",
            &["install", "--crds-only", "--dry-run", "-o", "json"],
        );
        assert!(out.success, "velero install --crds-only: {}", out.stderr);
        let mut list: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("velero install -o json is not JSON: {e}"));
        let keep_bsl_crd = crd == Crd::Velero;
        if let Some(items) = list["items"].as_array_mut() {
            items.retain(|c| {
                keep_bsl_crd || c["metadata"]["name"] != "backupstoragelocations.velero.io"
            });
        }
        let kubectl = plane.kubectl();
        let out = kubectl.run_with_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            &list.to_string(),
        );
        assert!(out.success, "applying Velero's CRDs: {}", out.stderr);
        kubectl.ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/backups.velero.io",
            "crd/restores.velero.io",
            "crd/schedules.velero.io",
        ]);
    });
}

/// `velero --kubeconfig K -n NAMESPACE ARGS...`, Velero's own CLI.
pub fn cli(plane: &ControlPlane, namespace: &str, args: &[&str]) -> Output {
    let out = Command::new(&peer().velero)
        .arg("--kubeconfig")
        .arg(&plane.kubeconfig)
        .args(["-n", namespace])
        .args(args)
        // The CLI keeps its settings under $HOME/.config/velero: one of the test's own.
        .env("HOME", &plane.dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("velero {args:?}: {e}"));
    Output {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `velero server` for one namespace, killed when dropped. One at a time on this machine:
/// Velero v1.18.3's controller manager also serves metrics on :8080, an address no flag sets
/// (two servers: "listen tcp :8080: bind: address already in use", and the second exits), so
/// each holds the lock file free_port keeps for port 8080.
pub struct VeleroServer {
    child: Option<Child>,
    pub log: PathBuf,
    _port_8080: std::fs::File,
}

impl VeleroServer {
    pub fn start(plane: &ControlPlane, namespace: &str, extra: &[&str]) -> VeleroServer {
        let peer = peer();
        let locks = std::env::temp_dir().join("bsl-sentinel-ports");
        std::fs::create_dir_all(&locks).unwrap_or_else(|e| panic!("{}: {e}", locks.display()));
        let port_8080 = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(locks.join("8080"))
            .unwrap_or_else(|e| panic!("the lock for port 8080: {e}"));
        port_8080
            .lock()
            .unwrap_or_else(|e| panic!("locking port 8080: {e}"));
        let (metrics, profiler) = (free_port(), free_port());
        let log = plane.dir.join(format!("velero-server-{namespace}.log"));
        let mut cmd = Command::new(&peer.velero);
        cmd.env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env("HOME", &plane.dir)
            .arg("server")
            .arg("--kubeconfig")
            .arg(&plane.kubeconfig)
            .args(["--namespace", namespace])
            .arg("--plugin-dir")
            .arg(&peer.plugins)
            .args(["--metrics-address", &format!("127.0.0.1:{metrics}")])
            .args(["--profiler-address", &format!("127.0.0.1:{profiler}")])
            .args(extra);
        // Its own process group, so that its plugins (processes it starts, which outlive a
        // killed server) go with it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = spawn(cmd, &log);
        let server = VeleroServer {
            child: Some(child),
            log,
            _port_8080: port_8080,
        };
        wait_for(
            "velero server's metrics port",
            &server.log,
            Duration::from_secs(90),
            || std::net::TcpStream::connect(("127.0.0.1", metrics)).is_ok(),
        );
        server
    }

    #[allow(
        dead_code,
        reason = "bench-reconciler reads the server's RSS; no test needs it"
    )]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or_default()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server has not exited (it never crashloops on a BSL's state).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for VeleroServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(group) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) on the process group this struct's child leads.
                #[allow(unsafe_code)]
                unsafe {
                    libc::kill(-group, libc::SIGKILL);
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
