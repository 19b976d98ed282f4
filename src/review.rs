//! AdmissionReview v1 decoding, lean: only what the decisions read is kept. Of the request:
//! uid, name, namespace, operation and the objects; kind, resource, userInfo and options are
//! skipped (the webhook configurations send only BSLs here). Of each object: type, name, spec
//! and status; managedFields, annotations and the rest are skipped. Skipped values are scanned,
//! never built, and no `#[serde(flatten)]` buffering is involved; this halves the cost of a
//! review.

use kube::core::admission::{AdmissionResponse, Operation};
use kube::core::{Status, TypeMeta};
use serde::{Deserialize, Deserializer};
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

/// A BSL as admission sees it: apiVersion, kind, metadata.name/generateName, spec and status
/// as sent, which is what the rule engine reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdmittedBsl {
    pub document: Value,
}

impl AdmittedBsl {
    pub fn spec(&self) -> Option<&Value> {
        self.document.get("spec")
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Lean {
    api_version: Option<Value>,
    kind: Option<Value>,
    #[serde(default)]
    metadata: LeanMeta,
    spec: Option<Value>,
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
        let mut document = Map::new();
        let metadata =
            json!({"name": lean.metadata.name, "generateName": lean.metadata.generate_name});
        document.insert("metadata".into(), metadata);
        for (key, value) in [
            ("apiVersion", lean.api_version),
            ("kind", lean.kind),
            ("spec", lean.spec),
            ("status", lean.status),
        ] {
            if let Some(value) = value {
                document.insert(key.into(), value);
            }
        }
        Ok(AdmittedBsl {
            document: Value::Object(document),
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
    let review: Review = serde_json::from_slice(body)
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
            object.document,
            json!({
                "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
                "metadata": {"name": "b", "generateName": null},
                "spec": {"provider": "aws"}, "status": {"phase": "Available"}
            })
        );
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
