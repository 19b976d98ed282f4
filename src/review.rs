//! AdmissionReview v1 decoding, lean: only what the decisions read is kept. Of the request:
//! uid, name, namespace, operation and the objects; kind, resource, userInfo and options are
//! skipped (the webhook configurations send only BSLs here). Of each object: type, name, spec
//! and status; managedFields, annotations and the rest are skipped. Skipped values are scanned,
//! never built, and no `#[serde(flatten)]` buffering is involved; this halves the cost of a
//! review.
//!
//! The spec is decoded straight into the typed spec in the same pass, where it fits exactly. A
//! spec that does not (an unknown field, a wrong type, a missing or null required field, a
//! repeated field) fails that pass, and the body is decoded again with the spec read as JSON, so
//! that the rules can name each bad field. Nearly every review takes one pass; the second costs
//! only reviews that carry a bad spec.

use std::borrow::Cow;

use kube::core::admission::{AdmissionResponse, Operation};
use kube::core::{Status, TypeMeta};
use serde::de::{self, DeserializeOwned};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::bsl::BackupStorageLocationSpec;
use crate::rules::{Head, Spec};

/// An AdmissionReview's request as the decisions read it.
#[derive(Debug)]
pub struct Request {
    /// The review's apiVersion and kind, which the answer carries back.
    pub types: TypeMeta,
    pub uid: String,
    pub name: String,
    pub namespace: Option<String>,
    pub operation: Operation,
    pub object: Option<AdmittedBsl>,
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

/// A BSL as admission sees it: what the rules, the answer and the status stamp read.
#[derive(Clone, Debug, Default)]
pub struct AdmittedBsl {
    pub api_version: Option<Value>,
    pub kind: Option<Value>,
    pub name: Option<Value>,
    pub generate_name: Option<Value>,
    pub status: Option<Value>,
    pub spec: Spec<'static>,
}

impl AdmittedBsl {
    pub fn head(&self) -> Head<'_> {
        Head {
            api_version: self.api_version.as_ref(),
            kind: self.kind.as_ref(),
            name: self.name.as_ref(),
        }
    }

    /// Whether both carry the same spec. Both objects of a review are read the same way (typed
    /// or JSON); were they not, they would count as different and the spec would be judged.
    pub fn same_spec(&self, other: &AdmittedBsl) -> bool {
        self.spec == other.spec
    }
}

/// An object's fields as sent, with its spec read as `S`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Object<S> {
    api_version: Option<Value>,
    kind: Option<Value>,
    #[serde(default)]
    metadata: Metadata,
    spec: Option<S>,
    status: Option<Value>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    name: Option<Value>,
    generate_name: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<S> {
    uid: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    object: Option<Object<S>>,
    old_object: Option<Object<S>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review<S> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<WireRequest<S>>,
}

/// A spec that decodes into the typed spec with no field left over: exactly where the shape
/// check on its JSON would report nothing. Any other spec fails the decode.
struct Exact(BackupStorageLocationSpec);

impl<'de> Deserialize<'de> for Exact {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut ignored = false;
        let spec = serde_ignored::deserialize(deserializer, |_| ignored = true)?;
        if ignored {
            return Err(de::Error::custom(
                "the spec has a field the typed spec does not know",
            ));
        }
        Ok(Exact(spec))
    }
}

impl<S> Review<S> {
    fn into_request(self, spec: impl Fn(S) -> Spec<'static>) -> Result<Request, String> {
        if self.api_version != "admission.k8s.io/v1" || self.kind != "AdmissionReview" {
            return Err(format!(
                "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got {:?} {:?}",
                self.api_version, self.kind
            ));
        }
        let request = self
            .request
            .ok_or_else(|| "the AdmissionReview has no request".to_string())?;
        let admitted = |object: Object<S>| AdmittedBsl {
            api_version: object.api_version,
            kind: object.kind,
            name: object.metadata.name,
            generate_name: object.metadata.generate_name,
            status: object.status,
            spec: object.spec.map_or(Spec::Missing, &spec),
        };
        Ok(Request {
            types: TypeMeta {
                api_version: self.api_version,
                kind: self.kind,
            },
            uid: request.uid,
            name: request.name,
            namespace: request.namespace,
            operation: request.operation,
            object: request.object.map(admitted),
            old_object: request.old_object.map(admitted),
        })
    }
}

fn parse<S: DeserializeOwned>(text: &str) -> Result<Review<S>, String> {
    serde_json::from_str(text).map_err(|e| format!("the body is not an AdmissionReview: {e}"))
}

/// Decodes an AdmissionReview v1 body; the error says what is wrong with it.
pub fn decode(body: &[u8]) -> Result<Request, String> {
    // One UTF-8 check of the whole body is cheaper than serde_json's check of each string.
    let text = std::str::from_utf8(body)
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    match parse::<Exact>(text) {
        Ok(review) => review.into_request(|Exact(spec)| Spec::Typed(spec)),
        // A null spec is None, so the JSON is never null here.
        Err(_) => parse::<Value>(text)?.into_request(|spec| Spec::Json(Cow::Owned(spec))),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::json;

    use super::*;
    use crate::rules::testing::cert_pem;
    use crate::rules::{validate_document, validate_parts};

    /// A review whose object carries `spec`, given as JSON text.
    fn with_spec(spec: &str) -> String {
        format!(
            r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {{"uid": "u", "operation": "CREATE", "name": "b",
                    "object": {{"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
                        "metadata": {{"name": "b", "managedFields": [{{"manager": "kubectl"}}]}},
                        "spec": {spec}}}}}}}"#
        )
    }

    fn object(body: &str) -> AdmittedBsl {
        decode(body.as_bytes())
            .unwrap_or_else(|e| panic!("{body}: {e}"))
            .object
            .unwrap_or_default()
    }

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
                    "spec": {"provider": "aws", "objectStorage": {"bucket": "b"}},
                    "status": {"phase": "Available"}
                }
            }
        });
        let request = decode(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(request.uid, "u");
        assert_eq!(request.types.api_version, "admission.k8s.io/v1");
        assert_eq!(request.namespace.as_deref(), Some("velero"));
        let object = request.object.unwrap_or_default();
        assert_eq!(object.api_version, Some(json!("velero.io/v1")));
        assert_eq!(object.kind, Some(json!("BackupStorageLocation")));
        assert_eq!(object.name, Some(json!("b")));
        assert_eq!(object.generate_name, None);
        assert_eq!(object.status, Some(json!({"phase": "Available"})));
        let Spec::Typed(spec) = &object.spec else {
            panic!("{:?}", object.spec);
        };
        assert_eq!(
            (spec.provider.as_str(), spec.object_storage.bucket.as_str()),
            ("aws", "b")
        );
    }

    /// The webhook's decode (typed where the spec fits, JSON where not) and the CLI's reading of
    /// the same object as JSON agree on every spec, clean or not, including text that JSON reads
    /// differently from serde's derive.
    #[test]
    fn typed_and_json_give_the_same_report() {
        let pem = STANDARD.encode(cert_pem());
        let specs = [
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b", "prefix": "p"}, "config": {"region": "r", "s3Url": "http://x:1"},
               "credential": {"name": "n", "key": "k"}, "default": true, "accessMode": "ReadWrite",
               "backupSyncPeriod": "1m", "validationFrequency": "0"}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": null, "config": null}"#.to_string(),
            format!(r#"{{"provider": "aws", "objectStorage": {{"bucket": "b", "caCert": "{pem}"}}}}"#),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b", "caCert": "***"}}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b", "caCert": "aGVsbG8="}}"#.to_string(),
            r#"{"objectStorage": {"bucket": "b"}}"#.to_string(),
            r#"{"provider": null, "objectStorage": {"bucket": "b"}}"#.to_string(),
            r#"{"provider": "aws"}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {}}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": null}}"#.to_string(),
            r#"{"provider": 1, "objectStorage": {"bucket": "b"}}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "config": {"region": 1}}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "default": "yes"}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "extra": 1}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b", "extra": {"deep": [1]}}}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": {"key": "k", "x": 1}}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": "b"}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": {"name": "n"}}"#.to_string(),
            r#"{"provider": "aws", "provider": "", "objectStorage": {"bucket": "b"}}"#.to_string(),
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "config": {"region": "a", "region": "b"}}"#.to_string(),
            r#"{"provider": "a\u0077s", "objectStorage": {"bucket": "a/b"}, "accessMode": "RW"}"#.to_string(),
            r#"{"provider": "azure", "objectStorage": {"bucket": "b"}}"#.to_string(),
            r#""spec""#.to_string(),
            r#"[]"#.to_string(),
            "null".to_string(),
        ];
        for text in specs {
            let body = with_spec(&text);
            let object = object(&body);
            let review: Value =
                serde_json::from_str(&body).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                validate_parts(&object.head(), &object.spec),
                validate_document(&review["request"]["object"]),
                "{text}"
            );
        }
    }

    #[test]
    fn only_exact_specs_are_typed() {
        let typed = |spec: &str| matches!(object(&with_spec(spec)).spec, Spec::Typed(_));
        assert!(typed(
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "config": {"k": "v"}}"#
        ));
        assert!(!typed(
            r#"{"provider": "aws", "objectStorage": {"bucket": "b", "prefixx": "p"}}"#
        ));
        assert!(!typed(
            r#"{"provider": "aws", "objectStorage": {"bucket": 1}}"#
        ));
        assert!(!typed(
            r#"{"provider": "aws", "provider": "gcp", "objectStorage": {"bucket": "b"}}"#
        ));
        assert_eq!(object(&with_spec("null")).spec, Spec::Missing);
        let no_spec = r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "object": {"metadata": {"name": "b"}}}}"#;
        assert_eq!(object(no_spec).spec, Spec::Missing);
    }

    #[test]
    fn specs_compare_typed_or_as_json() {
        let updated = |spec: &str| {
            object(&format!(
                r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": {{"uid": "u", "operation": "UPDATE", "object": {{"spec": {spec}}}}}}}"#
            ))
        };
        let a =
            updated(r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "default": true}"#);
        assert!(a.same_spec(&updated(
            r#"{"default":true,"objectStorage":{"bucket":"b"},"provider":"aws"}"#
        )));
        assert!(!a.same_spec(&updated(
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}}"#
        )));
        let bad = updated(r#"{"provider": "aws", "extra": 1}"#);
        assert!(bad.same_spec(&updated(r#"{"extra":1,"provider":"aws"}"#)));
        assert!(!bad.same_spec(&updated(r#"{"provider": "aws", "extra": 2}"#)));
        assert!(!a.same_spec(&updated("null")));
        assert!(updated("null").same_spec(&AdmittedBsl::default()));
    }

    #[test]
    fn decode_explains_what_is_wrong() {
        let not_json = decode(b"hello").err().unwrap_or_default();
        assert!(
            not_json.starts_with("the body is not an AdmissionReview"),
            "{not_json}"
        );
        let not_utf8 = decode(b"{\"apiVersion\": \"\xff\"}")
            .err()
            .unwrap_or_default();
        assert!(
            not_utf8.starts_with("the body is not an AdmissionReview"),
            "{not_utf8}"
        );
        // A bad spec alone does not make the body unreadable; a broken body still reads as one.
        let broken = decode(with_spec(r#"{"provider": "aws", "extra": 1"#).as_bytes())
            .err()
            .unwrap_or_default();
        assert!(
            broken.starts_with("the body is not an AdmissionReview: "),
            "{broken}"
        );
        assert!(!broken.contains("typed spec"), "{broken}");
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
