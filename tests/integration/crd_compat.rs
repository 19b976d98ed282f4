//! The BSL types and the project's CRD against Velero's own CRD, on a real apiserver.

use bsl_sentinel::bsl::BackupStorageLocation;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::{ControlPlane, Crd, run_script};

/// Two BSLs that together set every spec field Velero has (caCert and caCertRef are exclusive
/// for Velero at run time, so each has one).
fn manifests() -> Vec<Value> {
    let ca = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";
    vec![
        json!({
            "apiVersion": "velero.io/v1",
            "kind": "BackupStorageLocation",
            "metadata": {"name": "full-inline-ca"},
            "spec": {
                "provider": "aws",
                "config": {"region": "us-east-1", "s3Url": "http://127.0.0.1:9000", "s3ForcePathStyle": "true"},
                "credential": {"name": "cloud-credentials", "key": "cloud", "optional": false},
                "objectStorage": {"bucket": "velero", "prefix": "cluster-a", "caCert": ca},
                "default": true,
                "accessMode": "ReadOnly",
                "backupSyncPeriod": "1m30s",
                "validationFrequency": "0s"
            }
        }),
        json!({
            "apiVersion": "velero.io/v1",
            "kind": "BackupStorageLocation",
            "metadata": {"name": "full-ca-ref"},
            "spec": {
                "provider": "example.com/custom",
                "objectStorage": {"bucket": "b2", "caCertRef": {"name": "ca", "key": "ca.crt"}},
                "default": false,
                "accessMode": "ReadWrite",
                "backupSyncPeriod": "0",
                "validationFrequency": "1.5h"
            }
        }),
    ]
}

fn status(crd: Crd) -> Value {
    json!({
        "phase": if crd == Crd::Project { "Unknown" } else { "Unavailable" },
        "lastValidationTime": "2026-12-02T10:11:12Z",
        "lastSyncedTime": "2026-12-01T00:00:00Z",
        "lastSyncedRevision": "7c9a1c3e-0b7e-4d6f-9b43-2f7a8c1d2e3f",
        "message": "BackupStorageLocation \"x\" is unavailable: timeout",
        "accessMode": "ReadWrite"
    })
}

async fn round_trip(crd: Crd) {
    let plane = ControlPlane::get(crd);
    let ns = plane.namespace("roundtrip");
    let kubectl = plane.kubectl();
    let api: Api<BackupStorageLocation> = Api::namespaced(plane.client().await, &ns);

    for manifest in manifests() {
        let name = manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let out = kubectl.apply(&ns, &manifest.to_string());
        assert!(out.success, "kubectl apply {name}: {}", out.stderr);

        // Read with kube: the typed spec carries every field exactly as written.
        let typed = api
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("get {name}: {e}"));
        let spec = serde_json::to_value(&typed.spec).unwrap_or_default();
        assert_eq!(
            spec, manifest["spec"],
            "{name}: typed spec differs from what was applied"
        );

        // Write status as Velero does on its CRD: a merge patch on the main resource.
        let patch = json!({"status": status(crd)});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("patch status of {name}: {e}"));

        let got = kubectl.ok(&["get", "bsl", &name, "-n", &ns, "-o", "json"]);
        let got: Value = serde_json::from_str(&got.stdout).unwrap_or_default();
        assert_eq!(
            got["spec"], manifest["spec"],
            "{name}: spec changed by the status write"
        );
        assert_eq!(
            got["status"],
            status(crd),
            "{name}: status not stored as written"
        );

        // Decoding the whole object and encoding it again loses nothing either.
        let decoded: BackupStorageLocation =
            serde_json::from_value(got.clone()).unwrap_or_else(|e| panic!("decode {name}: {e}"));
        let encoded = serde_json::to_value(&decoded).unwrap_or_default();
        assert_eq!(encoded["spec"], got["spec"]);
        assert_eq!(encoded["status"], got["status"]);
    }
}

#[tokio::test]
async fn round_trip_on_velero_crd() {
    round_trip(Crd::Velero).await;
}

#[tokio::test]
async fn round_trip_on_project_crd() {
    round_trip(Crd::Project).await;
}

#[tokio::test]
async fn velero_crd_rejects_unknown_phase_and_project_crd_accepts_it() {
    for (crd, accepted) in [(Crd::Velero, false), (Crd::Project, true)] {
        let plane = ControlPlane::get(crd);
        let ns = plane.namespace("phase");
        let manifest = json!({
            "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
            "metadata": {"name": "p"},
            "spec": {"provider": "aws", "objectStorage": {"bucket": "b"}},
            "status": {"phase": "Unknown"}
        });
        let out = plane.kubectl().apply(&ns, &manifest.to_string());
        assert_eq!(out.success, accepted, "{crd:?}: {}", out.stderr);
        if !accepted {
            assert!(
                out.stderr.contains("Unsupported value: \"Unknown\""),
                "{}",
                out.stderr
            );
        }
    }
}

/// Each property of a schema, by its dotted path.
fn properties(schema: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    if let Some(props) = schema["properties"].as_object() {
        for (name, prop) in props {
            let here = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            out.push((here.clone(), prop.clone()));
            properties(prop, &here, out);
        }
    }
}

fn crd_schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

#[test]
fn project_crd_is_a_superset_of_velero_crd() {
    let velero_file = run_script("tests/peers/velero-crd.sh");
    let velero_yaml = std::fs::read_to_string(&velero_file).unwrap_or_default();
    let velero: Value = serde_saphyr::from_str(&velero_yaml).unwrap_or_default();
    let project = serde_json::to_value(bsl_sentinel::crd::crd()).unwrap_or_default();

    let mut theirs = Vec::new();
    properties(crd_schema(&velero), "", &mut theirs);
    let mut ours = Vec::new();
    properties(crd_schema(&project), "", &mut ours);
    assert!(
        theirs.len() > 25,
        "Velero's schema was not read: {velero_file}"
    );

    for (path, prop) in &theirs {
        // Every CRD has these implicitly; the apiserver fills them whatever the schema says.
        if ["apiVersion", "kind", "metadata"].contains(&path.as_str()) {
            continue;
        }
        let mine = ours.iter().find(|(p, _)| p == path).map(|(_, v)| v);
        let mine = mine.unwrap_or_else(|| panic!("{path} is in Velero's CRD but not in ours"));
        for key in ["type", "format", "nullable", "x-kubernetes-map-type"] {
            assert_eq!(mine[key], prop[key], "{path}: {key} differs");
        }
        assert_eq!(
            mine["additionalProperties"], prop["additionalProperties"],
            "{path}"
        );
        if let Some(values) = prop["enum"].as_array() {
            for v in values {
                let allowed = mine["enum"].as_array().is_some_and(|m| m.contains(v));
                assert!(allowed, "{path}: {v} allowed by Velero but not by us");
            }
        }
        // Never stricter: whatever we require, Velero requires too.
        for req in mine["required"].as_array().into_iter().flatten() {
            let theirs_too = prop["required"].as_array().is_some_and(|r| r.contains(req));
            assert!(theirs_too, "{path}: we require {req} and Velero does not");
        }
    }
    for (name, spec) in [("velero", &velero), ("project", &project)] {
        assert_eq!(
            spec["spec"]["versions"][0]["subresources"],
            json!({}),
            "{name}"
        );
    }
    let names = |crd: &Value| crd["spec"]["names"].clone();
    assert_eq!(names(&project)["shortNames"], names(&velero)["shortNames"]);
    assert_eq!(names(&project)["plural"], names(&velero)["plural"]);
}

#[tokio::test]
async fn kubectl_get_shows_printer_columns() {
    for crd in [Crd::Velero, Crd::Project] {
        let plane = ControlPlane::get(crd);
        let ns = plane.namespace("columns");
        let kubectl = plane.kubectl();
        let manifest = json!({
            "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
            "metadata": {"name": "primary"},
            "spec": {"provider": "aws", "objectStorage": {"bucket": "b"}, "default": true}
        });
        let out = kubectl.apply(&ns, &manifest.to_string());
        assert!(out.success, "{}", out.stderr);
        let api: Api<BackupStorageLocation> = Api::namespaced(plane.client().await, &ns);
        let patch =
            json!({"status": {"phase": "Available", "lastValidationTime": "2026-12-02T10:11:12Z"}});
        api.patch("primary", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("patch: {e}"));

        let table = kubectl.ok(&["get", "bsl", "-n", &ns]).stdout;
        let mut lines = table.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split("  ")
            .filter(|c| !c.is_empty())
            .map(str::trim)
            .collect();
        assert_eq!(
            header,
            ["NAME", "PHASE", "LAST VALIDATED", "AGE", "DEFAULT"],
            "{crd:?}:\n{table}"
        );
        let row: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(row.first(), Some(&"primary"), "{table}");
        assert_eq!(row.get(1), Some(&"Available"), "{table}");
        assert_eq!(row.last(), Some(&"true"), "{table}");
    }
}
