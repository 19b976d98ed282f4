//! The status write: phase, lastValidationTime and message, guarded by a test of the spec.

use jiff::Timestamp;
use json_patch::{
    AddOperation, Patch as JsonPatch, PatchOperation, TestOperation, jsonptr::PointerBuf,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::{Context, Error};
use crate::bsl::{Phase, StoredBsl};

/// Writes phase, lastValidationTime and message with a JSON patch that first tests that the
/// spec is still the one checked, so a concurrent spec edit is never answered with a stale
/// phase. Only status is touched; on a CRD with a status subresource it goes to /status.
/// Returns false when the spec had changed.
pub(super) async fn write_status(
    ctx: &Context,
    obj: &StoredBsl,
    phase: Option<Phase>,
    message: &str,
    now: Timestamp,
) -> Result<bool, Error> {
    // A BSL without spec (Velero's CRD allows one) has nothing to test.
    let spec = match &obj.spec_json {
        // The text was written from a parsed value: it parses.
        Some(text) => Some(serde_json::from_str(text).map_err(Error::StoredSpec)?),
        None => None,
    };
    let ops = operations(spec, obj.status.present, phase, message, now);
    let api: Api<StoredBsl> =
        Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
    let patch: Patch<()> = Patch::Json(JsonPatch(ops));
    let params = PatchParams::default();
    let subresource = ctx.served.load().is_some_and(|s| s.status_subresource);
    let _permit = ctx.writes.acquire().await;
    let result = if subresource {
        api.patch_status(&obj.name_any(), &params, &patch).await
    } else {
        api.patch(&obj.name_any(), &params, &patch).await
    };
    match result {
        Ok(_) => {
            tracing::debug!(phase = phase.map(Phase::as_str), "wrote status");
            Ok(true)
        }
        // The only operation that can be invalid is the test: the spec is no longer the one
        // checked (the apiserver says no more than "rejected ... due to an error").
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(false),
        // Deleted meanwhile: nothing left to write.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(true),
        Err(e) => Err(Error::WriteStatus(e)),
    }
}

/// lastValidationTime as written: RFC 3339 in whole seconds, as Velero writes it.
pub(super) fn validation_time(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The patch: the test of the spec checked, then the status fields, added one by one into an
/// existing status or as a whole status where there is none.
fn operations(
    spec: Option<Value>,
    status_present: bool,
    phase: Option<Phase>,
    message: &str,
    now: Timestamp,
) -> Vec<PatchOperation> {
    let mut fields = serde_json::Map::new();
    if let Some(phase) = phase {
        fields.insert("phase".into(), json!(phase.as_str()));
        // Every attempt sets lastValidationTime, as in Velero; an unchecked one is no attempt.
        fields.insert("lastValidationTime".into(), json!(validation_time(now)));
    }
    fields.insert("message".into(), json!(message));
    let mut ops: Vec<PatchOperation> = spec
        .map(|value| {
            PatchOperation::Test(TestOperation {
                path: PointerBuf::from_tokens(["spec"]),
                value,
            })
        })
        .into_iter()
        .collect();
    if status_present {
        for (key, value) in fields {
            ops.push(PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["status", key.as_str()]),
                value,
            }));
        }
    } else {
        ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["status"]),
            value: Value::Object(fields),
        }));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(ops: Vec<PatchOperation>) -> Value {
        serde_json::to_value(JsonPatch(ops)).unwrap_or_default()
    }

    #[test]
    fn the_spec_is_tested_before_status_fields_are_added() {
        let now = Timestamp::from_second(1_800_000_000).unwrap_or_default();
        let spec = json!({"provider": "aws"});
        assert_eq!(
            patch(operations(
                Some(spec.clone()),
                true,
                Some(Phase::Available),
                "",
                now
            )),
            json!([
                {"op": "test", "path": "/spec", "value": spec},
                {"op": "add", "path": "/status/lastValidationTime", "value": "2027-01-15T08:00:00Z"},
                {"op": "add", "path": "/status/message", "value": ""},
                {"op": "add", "path": "/status/phase", "value": "Available"},
            ])
        );
        // No status yet: added whole; unchecked: no phase, no lastValidationTime.
        assert_eq!(
            patch(operations(None, false, None, "plugin", now)),
            json!([{"op": "add", "path": "/status", "value": {"message": "plugin"}}])
        );
    }
}
