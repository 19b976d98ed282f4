//! A BSL as the engine receives it, in two parts: the head (apiVersion, kind, metadata.name)
//! and the spec. The CLI reads both from one JSON document. The webhook decodes the spec
//! straight into the typed spec, in the same pass as the review, wherever it fits exactly; it
//! reads the spec as JSON only where it does not (crate::review). Either way the report is the
//! same.

use std::borrow::Cow;

use serde_json::Value;

use crate::bsl::BackupStorageLocationSpec;

/// The parts of a manifest outside its spec that the rules judge.
#[derive(Clone, Copy, Debug)]
pub struct Head<'a> {
    pub api_version: Option<&'a Value>,
    pub kind: Option<&'a Value>,
    /// metadata.name.
    pub name: Option<&'a Value>,
}

impl<'a> Head<'a> {
    pub fn of(document: &'a Value) -> Self {
        Head {
            api_version: document.get("apiVersion"),
            kind: document.get("kind"),
            name: document.get("metadata").and_then(|m| m.get("name")),
        }
    }
}

#[expect(
    clippy::large_enum_variant,
    reason = "one lives in each decoded object; a Box would add an allocation to every review"
)]
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Spec<'a> {
    /// Absent or null.
    #[default]
    Missing,
    /// Fits the typed spec exactly (no field unknown, mistyped, missing or repeated), so its
    /// shape has nothing to report.
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
}
