//! The real bsl-sentinel binary as a child process against a test control plane, scoped to one
//! namespace (its BSLs, Lease and status ConfigMap), with its log captured.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::control_plane::{free_port, spawn};
use super::webhook::SecretMount;
use super::{ControlPlane, eventually};

pub struct Sentinel {
    child: Option<Child>,
    pub log: PathBuf,
    pub admin: u16,
    pub identity: String,
}

/// The binary cargo built for the tests (examples, which cargo gives no such variable, find it
/// beside their own folder), or the one BSL_SENTINEL_BIN names (to compare another build).
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("BSL_SENTINEL_BIN") {
        return path.into();
    }
    if let Some(path) = option_env!("CARGO_BIN_EXE_bsl-sentinel") {
        return path.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("bsl-sentinel")))
        .unwrap_or_else(|| "bsl-sentinel".into())
}

impl Sentinel {
    /// `serve --webhook=false` with short intervals; `extra` adds or overrides flags
    /// (`--webhook=true` among them serves the webhook too).
    pub async fn start(
        plane: &ControlPlane,
        namespace: &str,
        identity: &str,
        extra: &[&str],
    ) -> Sentinel {
        Sentinel::start_with(plane, &plane.kubeconfig, namespace, identity, extra, &[]).await
    }

    /// The same with another kubeconfig (one that reaches the apiserver through a link or a
    /// proxy) and environment variables set.
    pub async fn start_with(
        plane: &ControlPlane,
        kubeconfig: &std::path::Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Sentinel {
        let program = binary();
        Sentinel::start_program(&program, plane, kubeconfig, namespace, identity, extra, env).await
    }

    /// The same with another build of bsl-sentinel (a bench comparing two).
    pub async fn start_program(
        program: &std::path::Path,
        plane: &ControlPlane,
        kubeconfig: &std::path::Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Sentinel {
        let admin = free_port();
        let log = plane
            .dir
            .join(format!("sentinel-{namespace}-{identity}.log"));
        let mut cmd = Command::new(program);
        cmd.env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,bsl_sentinel=debug")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .arg("serve")
            // The reconciler alone, unless `extra` turns the webhook on.
            .args((!extra.iter().any(|a| a.starts_with("--webhook="))).then_some("--webhook=false"))
            .args(["--namespace", namespace, "--identity", identity])
            .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
            .args(extra)
            .envs(env.iter().copied());
        // Short intervals for tests, unless `extra` sets them.
        for (flag, value) in [
            ("--validation-frequency", "2s"),
            ("--check-timeout", "3s"),
            ("--health-log-interval", "1m"),
            ("--lease-duration", "4s"),
            ("--crd-refresh-interval", "2s"),
        ] {
            if !extra.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        let child = spawn(cmd, &log);
        let sentinel = Sentinel {
            child: Some(child),
            log,
            admin,
            identity: identity.to_string(),
        };
        sentinel
            .wait_for("the admin port", Duration::from_secs(20), || {
                sentinel.get("/livez").0 == 200
            })
            .await;
        sentinel
    }

    /// README's webhook-only mode (`--reconciler=false`) of `program`: the webhook for
    /// `namespace` served at `addr` with `mount`'s certificate.
    pub async fn start_webhook_only(
        program: &Path,
        plane: &ControlPlane,
        namespace: &str,
        identity: &str,
        mount: &SecretMount,
        addr: SocketAddr,
        env: &[(&str, &str)],
    ) -> Sentinel {
        let (addr_arg, cert, key) = (
            addr.to_string(),
            mount.cert().display().to_string(),
            mount.key().display().to_string(),
        );
        let flags = [
            "--webhook=true",
            "--reconciler=false",
            "--webhook-addr",
            &addr_arg,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ];
        Sentinel::start_program(
            program,
            plane,
            &plane.kubeconfig,
            namespace,
            identity,
            &flags,
            env,
        )
        .await
    }

    /// A plain HTTP/1.0 GET on the admin port: (status, body); (0, "") when nothing answers.
    pub fn get(&self, path: &str) -> (u16, String) {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.admin)) else {
            return (0, String::new());
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        let status = response
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn wait_for(&self, what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
        eventually(what, timeout, || {
            let result = if done() { Ok(()) } else { Err(Log(&self.log)) };
            std::future::ready(result)
        })
        .await
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or_default()
    }

    /// SIGTERM, as the kubelet stops a pod; returns at once (see [`Sentinel::wait_exit`]).
    pub fn send_sigterm(&self) {
        if let Some(child) = &self.child {
            super::sigterm(child);
        }
    }

    /// Waits up to `within` for the process to exit; its exit code.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let mut child = self.child.take()?;
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// SIGKILL: the replica dies without giving up its Lease.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The bsl-sentinel log, read when a failed wait prints it.
struct Log<'a>(&'a std::path::Path);

impl std::fmt::Display for Log<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = std::fs::read_to_string(self.0).unwrap_or_default();
        write!(f, "bsl-sentinel log:\n{text}")
    }
}
