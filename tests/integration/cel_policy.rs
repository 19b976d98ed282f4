//! The CEL ValidatingAdmissionPolicy kept for bench-admission (tests/bench/cel-policy.yaml) on
//! a real apiserver: it rejects what the rule engine rejects for each static rule it holds,
//! admits a valid BSL, and binds only to the namespaces labelled for it.

use bsl_sentinel::rules::validate_document;
use serde_json::{Value, json};

use crate::support::{ControlPlane, Crd, repo_root};

fn bsl(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": {"name": name},
        "spec": spec
    })
}

/// A BSL breaking one static rule each, with the field both the policy and the engine name.
fn broken() -> Vec<(Value, &'static str)> {
    let os = json!({"bucket": "velero"});
    vec![
        (
            bsl("no-provider", json!({"provider": "", "objectStorage": os})),
            "spec.provider",
        ),
        (
            bsl(
                "two-slashes",
                json!({"provider": "a.io/b/c", "objectStorage": os}),
            ),
            "spec.provider",
        ),
        (
            bsl(
                "no-bucket",
                json!({"provider": "aws", "objectStorage": {"bucket": ""}}),
            ),
            "spec.objectStorage.bucket",
        ),
        (
            bsl(
                "slash-bucket",
                json!({"provider": "aws", "objectStorage": {"bucket": "b/p"}}),
            ),
            "spec.objectStorage.bucket",
        ),
        (
            bsl(
                "two-cas",
                json!({"provider": "aws", "objectStorage": {"bucket": "b", "caCert": "eA==",
                    "caCertRef": {"name": "ca", "key": "ca.crt"}}}),
            ),
            "spec.objectStorage",
        ),
    ]
}

#[tokio::test]
async fn the_cel_policy_rejects_what_the_rules_reject_and_only_where_bound() {
    let plane = ControlPlane::get(Crd::Project);
    let kubectl = plane.kubectl();
    let policy = repo_root().join("tests/bench/cel-policy.yaml");
    let policy = policy.to_string_lossy();
    kubectl.ok(&["apply", "-f", &policy]);
    let bound = plane.namespace("cel-bound");
    kubectl.ok(&[
        "label",
        "namespace",
        &bound,
        "bsl-sentinel.io/cel-policy=on",
    ]);
    let unbound = plane.namespace("cel-unbound");

    let valid = bsl(
        "valid",
        json!({"provider": "aws", "objectStorage": {"bucket": "velero", "prefix": "a/b"},
            "config": {"region": "us-east-1"}, "accessMode": "ReadOnly"}),
    );
    assert!(validate_document(&valid).errors.is_empty());
    // The policy takes a few moments to be loaded after its binding is created.
    let mut out = kubectl.apply(&bound, &valid.to_string());
    for _ in 0..50 {
        if out.success {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        out = kubectl.apply(&bound, &valid.to_string());
    }
    assert!(out.success, "a valid BSL was refused: {}", out.stderr);

    for (doc, field) in broken() {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let report = validate_document(&doc);
        assert!(
            report.errors.iter().any(|e| e.path == field),
            "{name}: the rule engine names no error at {field}: {:?}",
            report.errors
        );
        // The policy is loaded lazily too: retry until it denies, then check what it said.
        let mut out = kubectl.apply(&bound, &doc.to_string());
        for _ in 0..50 {
            if !out.success {
                break;
            }
            kubectl.ok(&["delete", "bsl", "-n", &bound, &name]);
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            out = kubectl.apply(&bound, &doc.to_string());
        }
        assert!(
            !out.success,
            "{name} was admitted where the policy is bound"
        );
        assert!(
            out.stderr.contains("ValidatingAdmissionPolicy") && out.stderr.contains(field),
            "{name}: {}",
            out.stderr
        );
        let out = kubectl.apply(&unbound, &doc.to_string());
        assert!(
            out.success,
            "{name} was refused where the policy is not bound: {}",
            out.stderr
        );
    }
}
