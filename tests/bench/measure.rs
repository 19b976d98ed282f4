//! What the benches share: their flags, and what they measure the same way (percentiles,
//! cores, CPU time).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::{ControlPlane, Kubectl};

/// The log level bsl-sentinel runs at: what deploy/ ships (info, no debug line per check or
/// review), unless RUST_LOG says otherwise.
pub fn log_level() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into())
}

/// The value after `name` on the command line, if there is one (a flag after it is none).
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .filter(|v| !v.starts_with("--"))
        .cloned()
}

/// `name`'s positive whole number, or `default` without one; anything else ends the run.
pub fn count_arg(name: &str, default: usize) -> usize {
    match arg(name).map(|v| v.parse::<usize>()) {
        None => default,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("{name} takes a positive whole number");
            std::process::exit(2);
        }
    }
}

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

/// User and system CPU seconds in a /proc `stat` file (a process's or a thread's).
fn stat_cpu_secs(path: &Path) -> Option<f64> {
    // SAFETY: sysconf reads a constant of the running system.
    #[allow(unsafe_code)]
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string(path).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks)
}

/// A process's CPU seconds so far (0 once it is gone).
pub fn process_cpu_secs(pid: u32) -> f64 {
    stat_cpu_secs(&Path::new("/proc").join(pid.to_string()).join("stat")).unwrap_or(0.0)
}

/// The CPU seconds so far of this process's threads named `name`.
pub fn threads_cpu_secs(name: &str) -> f64 {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim() == name)
        })
        .filter_map(|task| stat_cpu_secs(&task.path().join("stat")))
        .sum()
}

/// The kube-apiserver serving `plane`: its user and system CPU seconds so far.
pub fn apiserver_cpu_secs(plane: &ControlPlane) -> f64 {
    let port = plane.server.rsplit(':').next().unwrap_or_default();
    let flag = format!("--secure-port={port}");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .find(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == flag.as_bytes()))
        })
        .and_then(|entry| stat_cpu_secs(&entry.path().join("stat")))
        .unwrap_or(0.0)
}

/// The requests the apiserver of `kubectl` has served so far, by verb and resource
/// (`PATCH backupstoragelocations`, `POST events`), from its `apiserver_request_total`.
pub fn apiserver_requests(kubectl: &Kubectl) -> BTreeMap<String, f64> {
    let metrics = kubectl.ok(&["get", "--raw", "/metrics"]).stdout;
    let mut counts = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(name)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('"'))
                .unwrap_or_default()
        };
        let resource = match label("subresource") {
            "" => label("resource").to_string(),
            sub => format!("{}/{sub}", label("resource")),
        };
        let key = format!("{} {resource}", label("verb"));
        *counts.entry(key).or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    counts
}

/// The requests between two `apiserver_requests`, per `per` (BSLs), the most frequent first,
/// leaving out those under one in a hundred.
pub fn requests_per(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    per: usize,
) -> String {
    let mut rates: Vec<(&String, f64)> = after
        .iter()
        .map(|(key, n)| {
            (
                key,
                (n - before.get(key).unwrap_or(&0.0)) / per.max(1) as f64,
            )
        })
        .filter(|(_, rate)| *rate >= 0.01)
        .collect();
    rates.sort_by(|a, b| b.1.total_cmp(&a.1));
    rates
        .iter()
        .map(|(key, rate)| format!("{key} {rate:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}
