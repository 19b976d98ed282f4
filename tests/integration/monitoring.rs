//! deploy/monitoring/: the PrometheusRule's alerts with the real promtool
//! (tests/peers/build-promtool.sh): `promtool check rules` and `promtool test rules` on
//! tests/monitoring/rules.test.yaml; and every query of the Grafana dashboard and of the rules
//! names a metric that a running bsl-sentinel's /metrics really exports.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::support::control_plane::free_port;
use crate::support::sentinel::Sentinel;
use crate::support::storage::credentials_ini;
use crate::support::{ControlPlane, Crd, repo_root, run_script};

fn promtool() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| PathBuf::from(run_script("tests/peers/build-promtool.sh")).join("promtool"))
}

fn read(path: &str) -> String {
    let file = repo_root().join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// spec.groups of deploy/monitoring/prometheusrule.yaml.
fn rule_groups() -> Value {
    let rule: Value = serde_saphyr::from_str(&read("deploy/monitoring/prometheusrule.yaml"))
        .unwrap_or_else(|e| panic!("prometheusrule.yaml is not YAML: {e}"));
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"]["groups"].clone()
}

fn rules(groups: &Value) -> Vec<&Value> {
    groups
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect()
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/monitoring/grafana-dashboard.json"))
        .unwrap_or_else(|e| panic!("grafana-dashboard.json is not JSON: {e}"))
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

#[test]
fn promtool_check_rules_accepts_the_prometheusrule_and_every_alert_says_what_to_do() {
    let groups = rule_groups();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let file = dir.path().join("rules.yaml");
    // JSON is YAML: the file promtool reads is the spec as it stands.
    write(&file, &json!({"groups": groups}).to_string());
    let (ok, out) = run(Command::new(promtool()).args(["check", "rules"]).arg(&file));
    assert!(ok, "promtool check rules: {out}");
    let alerts = rules(&groups);
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", alerts.len())),
        "{out}"
    );
    let names: BTreeSet<&str> = alerts.iter().filter_map(|r| r["alert"].as_str()).collect();
    for name in [
        "BackupStorageLocationUnavailable",
        "BackupStorageLocationsAllUnavailable",
        "BackupStorageLocationNoDefault",
        "BackupStorageLocationDefaultUnavailable",
        "BackupStorageLocationNotValidated",
        "BslSentinelNoLeader",
        "BslSentinelChecksStopped",
        "BslSentinelStatusWritesFailing",
        "BslSentinelDown",
    ] {
        assert!(names.contains(name), "no alert {name}: {names:?}");
    }
    for rule in alerts {
        let name = &rule["alert"];
        assert!(
            matches!(
                rule["labels"]["severity"].as_str(),
                Some("warning" | "critical")
            ),
            "{name}: severity"
        );
        assert!(
            rule["annotations"]["summary"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{name}: no summary"
        );
        let description = rule["annotations"]["description"]
            .as_str()
            .unwrap_or_default();
        // What to do: each names a command to run or a thing to check.
        assert!(
            description.contains("kubectl") || description.contains("log"),
            "{name}: the description says nothing to do: {description:?}"
        );
    }
    // The README documents each alert.
    let readme = read("README.md");
    for name in names {
        assert!(readme.contains(name), "README.md does not document {name}");
    }
}

#[test]
fn promtool_test_rules_fires_and_silences_the_alerts_as_the_unit_tests_say() {
    let mut groups = rule_groups();
    // The unit tests compare annotations whole: leave out the long descriptions (the checked
    // summary is templated with the labels too).
    for group in groups.as_array_mut().into_iter().flatten() {
        for rule in group["rules"].as_array_mut().into_iter().flatten() {
            if let Some(annotations) = rule["annotations"].as_object_mut() {
                annotations.remove("description");
            }
        }
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    write(
        &dir.path().join("rules.yaml"),
        &json!({"groups": groups}).to_string(),
    );
    let tests = dir.path().join("rules.test.yaml");
    write(&tests, &read("tests/monitoring/rules.test.yaml"));
    let (ok, out) = run(Command::new(promtool()).args(["test", "rules"]).arg(&tests));
    assert!(ok, "promtool test rules: {out}");
    assert!(out.contains("SUCCESS"), "{out}");
    // Each alert is tested firing at least once.
    let cases = read("tests/monitoring/rules.test.yaml");
    for rule in rules(&groups) {
        let name = rule["alert"].as_str().unwrap_or_default();
        assert!(
            cases.contains(&format!(
                "alertname: {name}\n        exp_alerts:\n          -"
            )),
            "no case where {name} fires"
        );
    }
}

/// The metric names in a PromQL expression: the words that start with bsl_sentinel_.
fn metric_names(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("bsl_sentinel_"))
        .map(String::from)
        .collect()
}

/// The names of the samples in an OpenMetrics scrape (`name{labels} value` or `name value`).
fn exported(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alert_queries_name_metrics_that_a_running_bsl_sentinel_exports() {
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    let ns = plane.namespace("monitoring");
    // A BSL whose storage refuses connections: a check, a failure with its reason, a phase.
    let cloud = base64::engine::general_purpose::STANDARD.encode(credentials_ini("a", "b"));
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cloud-credentials"}, "data": {"cloud": cloud}});
    let out = kubectl.apply(&ns, &secret.to_string());
    assert!(out.success, "{}", out.stderr);
    let dead = format!("http://127.0.0.1:{}", free_port());
    let bsl = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
        "metadata": {"name": "unreachable"},
        "spec": {"provider": "aws", "objectStorage": {"bucket": "backups"},
                 "credential": {"name": "cloud-credentials", "key": "cloud"},
                 "config": {"region": "us-east-1", "s3Url": dead, "s3ForcePathStyle": "true"}}});
    let out = kubectl.apply(&ns, &bsl.to_string());
    assert!(out.success, "{}", out.stderr);

    let sentinel = Sentinel::start(plane, &ns, "a", &[]).await;
    let mut scrape = String::new();
    sentinel
        .wait_for(
            "a checked, failed and Unavailable BSL in /metrics",
            Duration::from_secs(30),
            || {
                scrape = sentinel.get("/metrics").1;
                scrape.contains("bsl_sentinel_check_failures_total{reason=")
                    && scrape.contains(r#"name="unreachable",phase="Unavailable"} 1"#)
                    && scrape.contains("bsl_sentinel_check_duration_seconds_bucket{")
            },
        )
        .await;
    let names = exported(&scrape);

    let dashboard = dashboard();
    let mut queried = BTreeSet::new();
    let panels = dashboard["panels"].as_array().cloned().unwrap_or_default();
    assert!(!panels.is_empty(), "the dashboard has no panels");
    for panel in &panels {
        let title = &panel["title"];
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        assert!(!targets.is_empty(), "panel {title} has no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_default();
            let found = metric_names(expr);
            // `up` is Prometheus's own; every other query reads bsl-sentinel's metrics.
            assert!(
                !found.is_empty() || expr.contains("up{"),
                "panel {title}: {expr:?} names no bsl-sentinel metric"
            );
            for name in found {
                assert!(
                    names.contains(&name),
                    "panel {title}: {name} is not in /metrics:\n{scrape}"
                );
                queried.insert(name);
            }
        }
    }
    // The dashboard shows the phases, the check durations and the failures by reason.
    for needed in [
        "bsl_sentinel_bsl_phase",
        "bsl_sentinel_check_duration_seconds_bucket",
        "bsl_sentinel_check_failures_total",
    ] {
        assert!(queried.contains(needed), "no panel queries {needed}");
    }
    let failures = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(String::from))
        .find(|e| e.contains("bsl_sentinel_check_failures_total"))
        .unwrap_or_default();
    assert!(failures.contains("by (reason)"), "{failures}");

    for rule in rules(&rule_groups()) {
        let expr = rule["expr"].as_str().unwrap_or_default();
        for name in metric_names(expr) {
            assert!(
                names.contains(&name),
                "alert {}: {name} is not in /metrics:\n{scrape}",
                rule["alert"]
            );
        }
    }
}

#[test]
fn kustomize_renders_monitoring_whose_podmonitor_selects_the_deployment_pods_admin_port() {
    let kube = match std::env::var_os("BSL_SENTINEL_KUBE_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(run_script("tests/peers/build-kube.sh")),
    };
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let kubectl = crate::support::Kubectl::new(&kube.join("kubectl"), &home.path().join("none"));
    let render = |dir: &str| -> Vec<Value> {
        let path = repo_root().join(dir).display().to_string();
        let out = kubectl.ok(&["kustomize", &path]).stdout;
        serde_saphyr::from_multiple::<Value>(&out)
            .unwrap_or_else(|e| panic!("kubectl kustomize {dir}: {e}"))
            .into_iter()
            .filter(|d| !d.is_null())
            .collect()
    };
    let monitoring = render("deploy/monitoring");
    let of = |kind: &str| -> Value {
        monitoring
            .iter()
            .find(|o| o["kind"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("deploy/monitoring renders no {kind}"))
    };
    // In Velero's namespace, beside bsl-sentinel.
    for kind in ["PodMonitor", "PrometheusRule", "ConfigMap"] {
        assert_eq!(of(kind)["metadata"]["namespace"], "velero", "{kind}");
    }
    // The ConfigMap carries the dashboard file as it is, for Grafana's sidecar.
    let config_map = of("ConfigMap");
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    let json_text = config_map["data"]["grafana-dashboard.json"]
        .as_str()
        .unwrap_or_default();
    let embedded: Value = serde_json::from_str(json_text).unwrap_or_default();
    assert_eq!(embedded, dashboard());
    // The PodMonitor selects the Deployment's pods and scrapes a port they declare.
    let deployment = render("deploy")
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("deploy/ renders a Deployment");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let monitor = of("PodMonitor");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(!selector.is_empty(), "the PodMonitor selects every pod");
    for (k, v) in &selector {
        assert_eq!(&pod_labels[k], v, "pods lack label {k}={v}");
    }
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let admin = ports
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .unwrap_or_else(|| panic!("no container port {}", endpoint["port"]));
    // The admin port (/metrics) is 8080 by serve's default --admin-addr.
    assert_eq!(admin["containerPort"], 8080);
    // The job label the rules select.
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "job");
    assert_eq!(endpoint["relabelings"][0]["replacement"], "bsl-sentinel");
}
