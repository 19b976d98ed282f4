//! `bsl-sentinel get`: BSLs with the columns of `velero backup-location get`, read from the
//! cluster only.

use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::bsl::bsl_resource;

/// One BSL by name, or all of them, in `namespace` (None: every namespace), as sorted JSON.
/// Untyped, so that a BSL Velero's CRD admitted with a malformed spec is still listed.
pub async fn fetch(
    client: kube::Client,
    name: Option<&str>,
    namespace: Option<&str>,
) -> Result<Vec<Value>, String> {
    let resource = bsl_resource();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let mut items = match name {
        Some(name) => vec![api.get(name).await.map_err(|e| e.to_string())?],
        None => {
            api.list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
        }
    };
    items.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    Ok(items
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect())
}

pub const HEADER: [&str; 7] = [
    "NAME",
    "PROVIDER",
    "BUCKET/PREFIX",
    "PHASE",
    "LAST VALIDATED",
    "ACCESS MODE",
    "DEFAULT",
];

/// One row as Velero's CLI prints it: Unknown for a missing phase or lastValidationTime,
/// ReadWrite for an empty access mode, `true` or blank for default.
pub fn row(bsl: &Value) -> [String; 7] {
    let spec = &bsl["spec"];
    let status = &bsl["status"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut bucket = text(&spec["objectStorage"]["bucket"]);
    let prefix = text(&spec["objectStorage"]["prefix"]);
    if !prefix.is_empty() {
        bucket = format!("{bucket}/{prefix}");
    }
    let or = |v: &Value, fallback: &str| {
        Some(text(v))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| fallback.to_string())
    };
    [
        text(&bsl["metadata"]["name"]),
        text(&spec["provider"]),
        bucket,
        or(&status["phase"], "Unknown"),
        or(&status["lastValidationTime"], "Unknown"),
        or(&spec["accessMode"], "ReadWrite"),
        if spec["default"] == Value::Bool(true) {
            "true".into()
        } else {
            String::new()
        },
    ]
}

/// Left-aligned columns separated by two spaces, like kubectl's tables.
pub fn columns<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

pub fn table(bsls: &[Value]) -> String {
    let rows: Vec<[String; 7]> = bsls.iter().map(row).collect();
    columns(&HEADER, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_read_like_velero_backup_location_get() {
        let checked = json!({
            "metadata": {"name": "primary"},
            "spec": {"provider": "aws", "objectStorage": {"bucket": "b", "prefix": "p"}, "default": true, "accessMode": "ReadOnly"},
            "status": {"phase": "Available", "lastValidationTime": "2026-12-02T10:11:12Z"}
        });
        let fresh = json!({"metadata": {"name": "new"}, "spec": {"provider": "gcp", "objectStorage": {"bucket": "g"}}});
        let text = table(&[checked, fresh]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "NAME     PROVIDER  BUCKET/PREFIX  PHASE      LAST VALIDATED        ACCESS MODE  DEFAULT"
        );
        assert_eq!(
            lines[1],
            "primary  aws       b/p            Available  2026-12-02T10:11:12Z  ReadOnly     true"
        );
        assert_eq!(
            lines[2],
            "new      gcp       g              Unknown    Unknown               ReadWrite"
        );
    }
}
