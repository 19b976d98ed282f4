//! AdmissionReview v1 decoding, lean: only what the decisions read (type, name, spec, status)
//! is kept. metadata.managedFields, annotations and the rest are skipped while parsing, and no
//! `#[serde(flatten)]` buffering is involved; this halves the cost of a review.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::TypeMeta;
use kube::core::admission::AdmissionRequest;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

/// A BSL as admission sees it. `document` is what the rule engine reads: apiVersion, kind,
/// metadata.name/generateName, spec and status as sent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdmittedBsl {
    pub metadata: ObjectMeta,
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
    namespace: Option<String>,
}

impl<'de> Deserialize<'de> for AdmittedBsl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let lean = Lean::deserialize(deserializer)?;
        let mut document = json!({
            "metadata": {"name": lean.metadata.name, "generateName": lean.metadata.generate_name},
        });
        for (key, value) in [
            ("apiVersion", lean.api_version),
            ("kind", lean.kind),
            ("spec", lean.spec),
            ("status", lean.status),
        ] {
            if let Some(value) = value {
                document[key] = value;
            }
        }
        Ok(AdmittedBsl {
            metadata: ObjectMeta {
                name: lean.metadata.name,
                generate_name: lean.metadata.generate_name,
                namespace: lean.metadata.namespace,
                ..ObjectMeta::default()
            },
            document,
        })
    }
}

impl Serialize for AdmittedBsl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.document.serialize(serializer)
    }
}

crate::bsl::lean_bsl_resource!(AdmittedBsl);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<AdmissionRequest<AdmittedBsl>>,
}

/// Decodes an AdmissionReview v1 body; the error says what is wrong with it.
pub fn decode(body: &[u8]) -> Result<AdmissionRequest<AdmittedBsl>, String> {
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
    // The response must carry the review's apiVersion and kind back.
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
        let object = request.object.unwrap_or_default();
        assert_eq!(object.metadata.namespace.as_deref(), Some("velero"));
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
