//! A spec as the engine receives it. The webhook gets the spec as JSON text, which nearly always
//! fits the typed spec exactly: it is decoded straight into it, skipping the JSON tree that cost
//! a fifth of a review. Text that does not fit exactly (an unknown field, a wrong type, a missing
//! or null required field, a repeated field) is read as JSON instead, so that each bad field can
//! be named; either way the report is the same.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::bsl::BackupStorageLocationSpec;

#[expect(
    clippy::large_enum_variant,
    reason = "one lives on the stack per review; a Box would add an allocation to every review"
)]
pub enum Spec<'a> {
    /// Absent or null.
    Missing,
    /// Fits the typed spec exactly, so its shape has nothing to report.
    Typed(BackupStorageLocationSpec),
    Json(Cow<'a, Value>),
}

impl<'a> Spec<'a> {
    pub fn from_value(spec: Option<&'a Value>) -> Self {
        match spec {
            None | Some(Value::Null) => Spec::Missing,
            Some(spec) => Spec::Json(Cow::Borrowed(spec)),
        }
    }

    pub fn from_text(spec: Option<&RawValue>) -> Spec<'static> {
        let Some(text) = spec.map(RawValue::get) else {
            return Spec::Missing;
        };
        if let Some(spec) = exact(text) {
            return Spec::Typed(spec);
        }
        match serde_json::from_str(text) {
            Ok(Value::Null) => Spec::Missing,
            Ok(spec) => Spec::Json(Cow::Owned(spec)),
            // A RawValue is valid JSON; were it not, the shape check names the text.
            Err(_) => Spec::Json(Cow::Owned(Value::String(text.to_owned()))),
        }
    }
}

/// The typed spec, if the text decodes into it with no field left over: exactly where the shape
/// check on its JSON would report nothing.
fn exact(text: &str) -> Option<BackupStorageLocationSpec> {
    let mut ignored = false;
    let mut json = serde_json::Deserializer::from_str(text);
    let spec = serde_ignored::deserialize(&mut json, |_| ignored = true).ok()?;
    (!ignored).then_some(spec)
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::json;

    use super::super::testing::cert_pem;
    use super::super::{validate_document, validate_parts};
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// The webhook's path (text, decoded exactly where it fits) and the CLI's (JSON) agree on
    /// every spec, clean or not, including text that JSON reads differently from serde's derive.
    #[test]
    fn text_and_json_give_the_same_report() {
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
            let head = json!({"apiVersion": "velero.io/v1", "kind": "BackupStorageLocation", "metadata": {"name": "b"}});
            let mut doc = head.clone();
            doc["spec"] = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let raw = raw(&text);
            assert_eq!(
                validate_parts(&head, &Spec::from_text(Some(&raw))),
                validate_document(&doc),
                "{text}"
            );
        }
    }

    #[test]
    fn only_exact_text_is_typed() {
        let typed = |text: &str| matches!(Spec::from_text(Some(&raw(text))), Spec::Typed(_));
        assert!(typed(
            r#"{"provider": "aws", "objectStorage": {"bucket": "b"}, "config": {"k": "v"}}"#
        ));
        assert!(!typed(
            r#"{"provider": "aws", "objectStorage": {"bucket": "b", "prefixx": "p"}}"#
        ));
        assert!(!typed(
            r#"{"provider": "aws", "objectStorage": {"bucket": 1}}"#
        ));
        assert!(matches!(Spec::from_text(Some(&raw("null"))), Spec::Missing));
        assert!(matches!(Spec::from_text(None), Spec::Missing));
    }
}
