//! AdmissionReview v1 decoding, lean: only what the decisions read is kept. Of the request:
//! uid, name, namespace, operation and the objects; kind, resource, userInfo and options are
//! skipped (the webhook configurations send only BSLs here). Of each object: type, name, spec
//! and status; managedFields, annotations and the rest are skipped. Skipped values are scanned,
//! never built, and no `#[serde(flatten)]` buffering is involved; this halves the cost of a
//! review. The spec is kept as text, for the rules to decode straight into the typed spec.

use kube::core::admission::{AdmissionResponse, Operation};
use kube::core::{Status, TypeMeta};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// An AdmissionReview's request as the decisions read it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// The review's apiVersion and kind, which the answer carries back.
    #[serde(skip)]
    pub types: TypeMeta,
    pub uid: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default)]
    pub object: Option<AdmittedBsl>,
    #[serde(default)]
    pub old_object: Option<AdmittedBsl>,
}

impl Request {
    /// The answer allowing this request, which the decisions refine. kube's From<&AdmissionRequest>
    /// needs the whole request this decode skips; `invalid` is its only other constructor, so
    /// the allowed answer is built from that.
    pub fn allow(&self) -> AdmissionResponse {
        let mut response = AdmissionResponse::invalid("");
        response.types = self.types.clone();
        response.uid = self.uid.clone();
        response.allowed = true;
        response.result = Status::default();
        response
    }
}

/// A BSL as admission sees it, in the two parts the rule engine reads.
#[derive(Clone, Debug, Default)]
pub struct AdmittedBsl {
    /// apiVersion, kind, metadata.name/generateName and status, as sent.
    pub head: Value,
    /// The spec's JSON text as sent; None when absent or null.
    pub spec: Option<Box<RawValue>>,
}

impl AdmittedBsl {
    /// Whether both carry the same spec: the same text or, written differently, the same JSON.
    pub fn same_spec(&self, other: &AdmittedBsl) -> bool {
        match (&self.spec, &other.spec) {
            (None, None) => true,
            (Some(a), Some(b)) if a.get() == b.get() => true,
            (Some(a), Some(b)) => matches!(
                (serde_json::from_str::<Value>(a.get()), serde_json::from_str::<Value>(b.get())),
                (Ok(a), Ok(b)) if a == b
            ),
            _ => false,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Lean {
    api_version: Option<Value>,
    kind: Option<Value>,
    #[serde(default)]
    metadata: LeanMeta,
    spec: Option<Box<RawValue>>,
    status: Option<Value>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    name: Option<String>,
    generate_name: Option<String>,
}

impl<'de> Deserialize<'de> for AdmittedBsl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let lean = Lean::deserialize(deserializer)?;
        let mut head = Map::new();
        let metadata =
            json!({"name": lean.metadata.name, "generateName": lean.metadata.generate_name});
        head.insert("metadata".into(), metadata);
        for (key, value) in [
            ("apiVersion", lean.api_version),
            ("kind", lean.kind),
            ("status", lean.status),
        ] {
            if let Some(value) = value {
                head.insert(key.into(), value);
            }
        }
        Ok(AdmittedBsl {
            head: Value::Object(head),
            spec: lean.spec,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<Request>,
}

/// Decodes an AdmissionReview v1 body; the error says what is wrong with it.
pub fn decode(body: &[u8]) -> Result<Request, String> {
    // One UTF-8 check of the whole body is cheaper than serde_json's check of each string.
    let review: Review = std::str::from_utf8(body)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str(text).map_err(|e| e.to_string()))
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(format!(
            "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got {:?} {:?}",
            review.api_version, review.kind
        ));
    }
    let mut request = review
        .request
        .ok_or_else(|| "the AdmissionReview has no request".to_string())?;
    request.types = TypeMeta {
        api_version: review.api_version,
        kind: review.kind,
    };
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_the_rules_read_and_drops_the_rest() {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "operation": "CREATE", "name": "b", "namespace": "velero",
                "kind": {"group": "velero.io", "version": "v1", "kind": "BackupStorageLocation"},
                "resource": {"group": "velero.io", "version": "v1", "resource": "backupstoragelocations"},
                "userInfo": {"username": "admin"},
                "object": {
                    "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
                    "metadata": {"name": "b", "namespace": "velero", "managedFields": [{"manager": "kubectl"}], "annotations": {"a": "b"}},
                    "spec": {"provider": "aws"}, "status": {"phase": "Available"}
                }
            }
        });
        let request = decode(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(request.uid, "u");
        assert_eq!(request.types.api_version, "admission.k8s.io/v1");
        assert_eq!(request.namespace.as_deref(), Some("velero"));
        let object = request.object.unwrap_or_default();
        assert_eq!(
            object.head,
            json!({
                "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
                "metadata": {"name": "b", "generateName": null},
                "status": {"phase": "Available"}
            })
        );
        assert_eq!(
            object.spec.as_deref().map(RawValue::get),
            Some(r#"{"provider":"aws"}"#)
        );
    }

    #[test]
    fn specs_compare_as_json() {
        let object = |spec: &str| {
            let body = format!(
                r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": {{"uid": "u", "operation": "UPDATE", "object": {{"spec": {spec}}}}}}}"#
            );
            decode(body.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"))
                .object
                .unwrap_or_default()
        };
        let a = object(r#"{"provider": "aws", "default": true}"#);
        assert!(a.same_spec(&object(r#"{"default":true,"provider":"aws"}"#)));
        assert!(!a.same_spec(&object(r#"{"provider": "aws"}"#)));
        assert!(!a.same_spec(&object("null")));
        assert!(object("null").same_spec(&AdmittedBsl::default()));
    }

    #[test]
    fn decode_explains_what_is_wrong() {
        let not_json = decode(b"hello").err().unwrap_or_default();
        assert!(
            not_json.starts_with("the body is not an AdmissionReview"),
            "{not_json}"
        );
        let v1beta1 =
            decode(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#)
                .err()
                .unwrap_or_default();
        assert!(
            v1beta1.contains("expected apiVersion admission.k8s.io/v1"),
            "{v1beta1}"
        );
        let empty = decode(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
            .err()
            .unwrap_or_default();
        assert_eq!(empty, "the AdmissionReview has no request");
    }
}
