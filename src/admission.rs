//! The admission decisions, as pure functions of an admission request and read-only views of
//! the cluster: the HTTP edge (webhook.rs) only decodes and encodes.

use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, jsonptr::PointerBuf};
use kube::core::Status;
use kube::core::admission::{AdmissionResponse, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use serde_json::{Value, json};

use crate::bsl::{GROUP, Phase, SecretKeySelector};
use crate::review::{AdmittedBsl, Request};
use crate::rules;
use crate::served_crd::ServedCrd;

/// The message a new BSL carries until the reconciler's first check.
pub const PENDING_MESSAGE: &str = "Pending: the first connectivity check has not run yet";

/// Kubernetes truncates warnings past 256 characters and asks for at most 120.
const MAX_WARNING: usize = 120;

/// What the validator may know about the rest of the cluster, from watch caches. `None` means
/// "not known" (cache not synced, or namespace not watched): no warning is given then.
pub trait ClusterView {
    /// Names of BSLs in the namespace whose spec.default is true.
    fn defaults(&self, namespace: &str) -> Option<Vec<String>>;
    fn secret_exists(&self, namespace: &str, name: &str) -> Option<bool>;
}

pub fn validate(req: &Request, cluster: &(impl ClusterView + ?Sized)) -> AdmissionResponse {
    let response = req.allow();
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let Some(object) = req.object.as_ref() else {
        return response.deny("the request carries no object");
    };
    // Status writes (Velero's and ours) go to the main resource on Velero's CRD: a spec that
    // did not change is never re-judged, so an old invalid BSL can still get its status.
    if req.operation == Operation::Update
        && let Some(old) = req.old_object.as_ref()
        && old.same_spec(object)
    {
        return response;
    }
    let report = rules::validate_parts(&object.head(), &object.spec);
    let namespace = req.namespace.as_deref().unwrap_or_default();
    let mut warnings = report.warnings.clone();
    warnings.extend(cluster_warnings(
        &object.spec,
        &req.name,
        namespace,
        cluster,
    ));
    let warnings: Vec<String> = warnings.iter().map(|w| one_line(w)).collect();

    let mut response = response;
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    if report.errors.is_empty() {
        return response;
    }
    let name = display_name(object, &req.name);
    let mut response = response.deny(invalid_message(&name, &report.errors));
    response.result = Status::failure(&response.result.message, "Invalid")
        .with_code(422)
        .with_details(StatusDetails {
            name,
            group: GROUP.into(),
            kind: "BackupStorageLocation".into(),
            causes: report
                .errors
                .iter()
                .map(|e| StatusCause {
                    reason: e.reason().into(),
                    message: e.message(),
                    field: e.path.clone(),
                })
                .collect(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
    response
}

/// Kubernetes' own wording: `Kind.group "name" is invalid: [a, b]` (no brackets for one error).
fn invalid_message(name: &str, errors: &[rules::FieldError]) -> String {
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let list = match list.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    format!("BackupStorageLocation.{GROUP} {name:?} is invalid: {list}")
}

fn display_name(object: &AdmittedBsl, request_name: &str) -> String {
    [&object.name, &object.generate_name]
        .into_iter()
        .find_map(|v| v.as_ref()?.as_str().filter(|s| !s.is_empty()))
        .unwrap_or(request_name)
        .to_string()
}

fn cluster_warnings(
    spec: &rules::Spec,
    name: &str,
    namespace: &str,
    cluster: &(impl ClusterView + ?Sized),
) -> Vec<String> {
    let mut warnings = Vec::new();
    let (default, secrets) = references(spec);
    if default {
        let others: Vec<String> = cluster
            .defaults(namespace)
            .unwrap_or_default()
            .into_iter()
            .filter(|other| other != name)
            .collect();
        if !others.is_empty() {
            warnings.push(format!(
                "spec.default: {} already the default here; Velero keeps only the newest default",
                quoted_list(&others, "is", "are")
            ));
        }
    }
    for (path, secret) in [CREDENTIAL, CA_CERT_REF].into_iter().zip(secrets) {
        let Some(secret) = secret.filter(|s| !s.is_empty()) else {
            continue;
        };
        if cluster.secret_exists(namespace, secret) == Some(false) {
            warnings.push(format!(
                "{path}: Secret {secret:?} does not exist (yet) in namespace {namespace:?}"
            ));
        }
    }
    warnings
}

const CREDENTIAL: &str = "spec.credential.name";
const CA_CERT_REF: &str = "spec.objectStorage.caCertRef.name";

/// What the cluster warnings read of a spec, in whichever form it came: whether it is marked
/// default, and the Secrets named at CREDENTIAL and CA_CERT_REF.
fn references<'a>(spec: &'a rules::Spec) -> (bool, [Option<&'a str>; 2]) {
    match spec {
        rules::Spec::Missing => (false, [None, None]),
        rules::Spec::Typed(spec) => (
            spec.default == Some(true),
            [
                spec.credential.as_ref().map(SecretKeySelector::name),
                spec.object_storage
                    .ca_cert_ref
                    .as_ref()
                    .map(SecretKeySelector::name),
            ],
        ),
        rules::Spec::Json(spec) => (
            spec["default"] == Value::Bool(true),
            [
                spec["credential"]["name"].as_str(),
                spec["objectStorage"]["caCertRef"]["name"].as_str(),
            ],
        ),
    }
}

fn quoted_list(names: &[String], one: &str, many: &str) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let verb = if names.len() == 1 { one } else { many };
    format!("BackupStorageLocation {} {verb}", quoted.join(", "))
}

/// Warnings reach the terminal as `Warning: ...`: one line, bounded.
fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= MAX_WARNING {
        return flat;
    }
    let cut: String = flat.chars().take(MAX_WARNING - 3).collect();
    format!("{cut}...")
}

pub fn mutate(req: &Request, served: ServedCrd) -> AdmissionResponse {
    let response = req.allow();
    if req.operation != Operation::Create {
        return response;
    }
    let Some(object) = req.object.as_ref() else {
        return response;
    };
    match initial_status_patch(object.status.as_ref(), served) {
        Some(patch) => match response.clone().with_patch(patch) {
            Ok(patched) => patched,
            // Never break creation: an unserializable patch just means no stamp.
            Err(_) => response,
        },
        None => response,
    }
}

/// The initial status of a new BSL: phase `Unknown` where the served CRD allows it, and a
/// message saying the first check is pending. On Velero's stock CRD (no `Unknown`) only the
/// message is set and any phase is removed: an absent phase is what Velero's CLI shows as
/// Unknown, and a copied `Available` would claim a check that never ran here.
///
/// Idempotent (reinvocationPolicy IfNeeded): applied to its own output it returns None. None
/// too where a status subresource makes the apiserver drop status on create. `status` is the
/// new object's, as sent.
pub fn initial_status_patch(status: Option<&Value>, served: ServedCrd) -> Option<Patch> {
    if served.status_subresource {
        return None;
    }
    let phase = served
        .unknown_phase_allowed
        .then(|| Value::from(Phase::Unknown.as_str()));
    let Some(status) = status.and_then(Value::as_object) else {
        let mut status = json!({ "message": PENDING_MESSAGE });
        if let Some(phase) = phase {
            status["phase"] = phase;
        }
        return Some(Patch(vec![add("/status", status)]));
    };
    let mut ops = Vec::new();
    match (phase, status.get("phase")) {
        (Some(want), have) if have != Some(&want) => ops.push(add("/status/phase", want)),
        (None, Some(_)) => ops.push(PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(["status", "phase"]),
        })),
        _ => {}
    }
    if status.get("message").and_then(Value::as_str) != Some(PENDING_MESSAGE) {
        ops.push(add("/status/message", PENDING_MESSAGE.into()));
    }
    (!ops.is_empty()).then_some(Patch(ops))
}

fn add(path: &str, value: Value) -> PatchOperation {
    let tokens = path.split('/').skip(1);
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(tokens),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROJECT: ServedCrd = ServedCrd {
        unknown_phase_allowed: true,
        status_subresource: false,
    };
    const VELERO: ServedCrd = ServedCrd {
        unknown_phase_allowed: false,
        status_subresource: false,
    };

    fn apply(object: &Value, patch: &Patch) -> Value {
        let mut out = object.clone();
        let applied = json_patch::patch(&mut out, patch);
        assert!(
            applied.is_ok(),
            "patch {patch:?} does not apply: {applied:?}"
        );
        out
    }

    #[test]
    fn stamps_unknown_where_allowed() {
        let object = json!({"spec": {}});
        let patch = initial_status_patch(object.get("status"), PROJECT);
        let out = apply(&object, patch.as_ref().unwrap_or(&Patch(vec![])));
        assert_eq!(
            out["status"],
            json!({"phase": "Unknown", "message": PENDING_MESSAGE})
        );
    }

    #[test]
    fn velero_crd_gets_message_only_and_loses_copied_phase() {
        let object =
            json!({"spec": {}, "status": {"phase": "Available", "lastSyncedRevision": "r"}});
        let patch = initial_status_patch(object.get("status"), VELERO);
        let out = apply(&object, patch.as_ref().unwrap_or(&Patch(vec![])));
        assert_eq!(
            out["status"],
            json!({"message": PENDING_MESSAGE, "lastSyncedRevision": "r"})
        );
    }

    #[test]
    fn patch_is_idempotent() {
        for served in [PROJECT, VELERO] {
            for object in [
                json!({"spec": {}}),
                json!({"spec": {}, "status": {}}),
                json!({"spec": {}, "status": {"phase": "Unavailable", "message": "x"}}),
            ] {
                let first = initial_status_patch(object.get("status"), served);
                assert!(first.is_some(), "{object} needs a stamp");
                let once = apply(&object, first.as_ref().unwrap_or(&Patch(vec![])));
                assert_eq!(
                    initial_status_patch(once.get("status"), served),
                    None,
                    "{served:?} {object}"
                );
            }
        }
    }

    #[test]
    fn no_patch_with_status_subresource() {
        let served = ServedCrd {
            unknown_phase_allowed: true,
            status_subresource: true,
        };
        assert_eq!(initial_status_patch(None, served), None);
    }

    #[test]
    fn warnings_are_one_bounded_line() {
        let long = format!("a\nb{}", "x".repeat(300));
        let line = one_line(&long);
        assert!(!line.contains('\n'));
        assert_eq!(line.chars().count(), MAX_WARNING);
        assert_eq!(one_line("short"), "short");
    }

    #[test]
    fn invalid_message_reads_like_kubernetes() {
        let errors = rules::validate_document(&json!({
            "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
            "metadata": {"name": "x"},
            "spec": {"provider": "", "objectStorage": {"bucket": "a/b"}}
        }))
        .errors;
        let message = invalid_message("x", &errors);
        assert!(
            message.starts_with(
                "BackupStorageLocation.velero.io \"x\" is invalid: [spec.provider: Required value"
            ),
            "{message}"
        );
        assert!(
            message.contains("spec.objectStorage.bucket: Invalid value: \"a/b\""),
            "{message}"
        );
    }
}
