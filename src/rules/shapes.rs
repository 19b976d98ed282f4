//! The JSON shape of a spec, mirroring crate::bsl, so that a document which does not decode
//! still gets its errors at the right field (serde alone names no path).

use k8s_openapi::ByteString;
use serde::Deserialize;
use serde_json::Value;

use super::report::{ErrorKind, Report, short, short_n};

#[derive(Clone, Copy)]
pub(crate) enum Shape {
    Str,
    Bool,
    Bytes,
    StrMap,
    Obj(&'static [Field]),
}

/// Name, shape, and for a required field the detail to show when it is missing.
type Field = (&'static str, Shape, Option<&'static str>);

const SELECTOR: &[Field] = &[
    (
        "key",
        Shape::Str,
        Some("set the key, within the Secret, that holds the file"),
    ),
    ("name", Shape::Str, None),
    ("optional", Shape::Bool, None),
];

const OBJECT_STORAGE: &[Field] = &[
    (
        "bucket",
        Shape::Str,
        Some("set the bucket that holds the backups"),
    ),
    ("prefix", Shape::Str, None),
    ("caCert", Shape::Bytes, None),
    ("caCertRef", Shape::Obj(SELECTOR), None),
];

pub(crate) const SPEC: &[Field] = &[
    (
        "provider",
        Shape::Str,
        Some("set the object store plugin, e.g. aws, gcp or azure"),
    ),
    ("config", Shape::StrMap, None),
    ("credential", Shape::Obj(SELECTOR), None),
    (
        "objectStorage",
        Shape::Obj(OBJECT_STORAGE),
        Some("set objectStorage with at least a bucket"),
    ),
    ("default", Shape::Bool, None),
    ("accessMode", Shape::Str, None),
    ("backupSyncPeriod", Shape::Str, None),
    ("validationFrequency", Shape::Str, None),
];

pub(crate) fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => short(s),
        v => short(&v.to_string()),
    }
}

pub(crate) fn check_shape(v: &Value, shape: Shape, path: &str, r: &mut Report) {
    // Nearly every spec fits: check it in place first, so paths are formatted only for one
    // that has something to report.
    if !fits(v, shape) {
        report_shape(v, shape, path, r);
    }
}

fn report_shape(v: &Value, shape: Shape, path: &str, r: &mut Report) {
    let leaf = match shape {
        Shape::Str => String::deserialize(v).map(drop),
        Shape::Bool => bool::deserialize(v).map(drop),
        Shape::Bytes => ByteString::deserialize(v).map(drop),
        Shape::StrMap | Shape::Obj(_) => {
            let Some(object) = v.as_object() else {
                return r.invalid(path, &json_text(v), "must be an object");
            };
            return check_object(object, shape, path, r);
        }
    };
    if let Err(e) = leaf {
        r.invalid(path, &json_text(v), e.to_string());
    }
}

/// Whether `v` has `shape` with nothing to report: every leaf of the right type, every
/// required field present, no unknown field.
fn fits(v: &Value, shape: Shape) -> bool {
    match (shape, v) {
        (Shape::Str, Value::String(_)) | (Shape::Bool, Value::Bool(_)) => true,
        (Shape::StrMap, Value::Object(o)) => o.values().all(Value::is_string),
        (Shape::Obj(fields), Value::Object(o)) => {
            o.keys().all(|k| fields.iter().any(|(name, ..)| name == k))
                && fields
                    .iter()
                    .all(|&(name, shape, required)| match o.get(name) {
                        None | Some(Value::Null) => required.is_none(),
                        Some(v) => fits(v, shape),
                    })
        }
        // Base64 and the rest: the full check decides.
        _ => false,
    }
}

fn check_object(object: &serde_json::Map<String, Value>, shape: Shape, path: &str, r: &mut Report) {
    let Shape::Obj(fields) = shape else {
        for (key, v) in object {
            report_shape(v, Shape::Str, &format!("{path}.{key}"), r);
        }
        return;
    };
    for key in object
        .keys()
        .filter(|k| !fields.iter().any(|(name, ..)| name == k))
    {
        r.warn(
            &format!("{path}.{}", short_n(key, 32)),
            "unknown field; the API server drops it",
        );
    }
    for &(name, shape, required) in fields {
        let path = format!("{path}.{name}");
        // The API server drops nulls for these fields, so null reads as absent.
        match (object.get(name), required) {
            (None | Some(Value::Null), Some(detail)) => r.error(path, ErrorKind::Required, detail),
            (None | Some(Value::Null), None) => {}
            (Some(v), _) => report_shape(v, shape, &path, r),
        }
    }
}

pub(crate) fn check_const(value: Option<&Value>, key: &str, want: &str, r: &mut Report) {
    match value {
        None | Some(Value::Null) => r.error(key, ErrorKind::Required, format!("set {key}: {want}")),
        Some(Value::String(s)) if s == want => {}
        Some(v) => r.not_supported(key, &json_text(v), &[want], ""),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use serde_json::json;

    use super::super::testing::*;
    use super::*;
    use crate::bsl::{BackupStorageLocationSpec, ObjectStorageLocation, SecretKeySelector};

    #[test]
    fn shape_tables_match_the_types() {
        let full = BackupStorageLocationSpec {
            provider: "aws".into(),
            config: Some([("region".to_string(), "r".to_string())].into()),
            credential: Some(SecretKeySelector {
                key: "k".into(),
                name: Some("n".into()),
                optional: Some(true),
            }),
            object_storage: ObjectStorageLocation {
                bucket: "b".into(),
                prefix: Some("p".into()),
                ca_cert: Some(ByteString(cert_pem().into_bytes())),
                ca_cert_ref: Some(selector(Some("n"), "k")),
            },
            default: Some(true),
            access_mode: Some("ReadOnly".into()),
            backup_sync_period: Some("1m".into()),
            validation_frequency: Some("1m".into()),
        };
        let Ok(v) = serde_json::to_value(&full) else {
            panic!("spec serializes");
        };
        let mut r = Report::default();
        check_shape(&v, Shape::Obj(SPEC), "spec", &mut r);
        assert_eq!(r, Report::default());
    }

    /// The fast path skips the report only where the report would be empty, and takes the
    /// report for every spec that has something in it (caCert's base64 is left to the report).
    #[test]
    fn fits_agrees_with_the_report() {
        let specs = [
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}}),
            json!({"provider": "aws", "objectStorage": {"bucket": "b", "prefix": "p"}, "config": {"region": "r"},
                   "credential": {"name": "n", "key": "k"}, "default": true, "accessMode": "ReadWrite"}),
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": null}),
            json!({"objectStorage": {"bucket": "b"}}),
            json!({"provider": "aws"}),
            json!({"provider": "aws", "objectStorage": {}}),
            json!({"provider": 1, "objectStorage": {"bucket": "b"}}),
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "config": {"region": 1}}),
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "default": "yes"}),
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "extra": 1}),
            json!({"provider": "aws", "objectStorage": {"bucket": "b", "extra": 1}}),
            json!({"provider": "aws", "objectStorage": "b"}),
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": {"name": "n"}}),
            json!("spec"),
        ];
        for spec in specs {
            let mut r = Report::default();
            report_shape(&spec, Shape::Obj(SPEC), "spec", &mut r);
            assert_eq!(
                fits(&spec, Shape::Obj(SPEC)),
                r == Report::default(),
                "{spec}: {r:?}"
            );
        }
    }
}
