//! What the benches measure the same way: percentiles, cores, the apiserver's CPU time.

use std::time::Duration;

use crate::support::ControlPlane;

/// The `p` quantile of sorted latencies, in milliseconds (0 for none).
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The kube-apiserver serving `plane`: its user and system CPU seconds so far.
pub fn apiserver_cpu_secs(plane: &ControlPlane) -> f64 {
    let port = plane.server.rsplit(':').next().unwrap_or_default();
    let flag = format!("--secure-port={port}");
    // SAFETY: sysconf reads a constant of the running system.
    #[allow(unsafe_code)]
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .find(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == flag.as_bytes()))
        })
        .and_then(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .and_then(|stat| {
            // The fields after the command name, which is in parentheses and may hold spaces.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .unwrap_or(0.0)
}
