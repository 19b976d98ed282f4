//! The Events a BSL's failures and recoveries are announced with.

use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

use super::Context;
use crate::bsl::{Phase, StoredBsl};

/// Failures and recoveries are announced with an Event; the expected first Available of a new
/// BSL is not (status and lastValidationTime show it), since an Event per created BSL doubled
/// the apiserver's writes when platforms create BSLs by the thousand. A BSL left unchecked
/// (plugin) has none.
pub(super) fn newsworthy(before: Option<Phase>, after: Option<Phase>) -> bool {
    match after {
        Some(Phase::Available) => before == Some(Phase::Unavailable),
        Some(Phase::Unavailable) => before != after,
        _ => false,
    }
}

/// A Kubernetes Event (events.k8s.io/v1) on a phase change. Created directly, not through
/// kube-rs' Recorder: its cache of event series grew by about 35 MiB for 10,000 new BSLs, and
/// a phase change is no series.
pub(super) async fn announce(ctx: &Context, obj: &StoredBsl, phase: Option<Phase>, message: &str) {
    let (type_, reason, note) = match phase {
        Some(Phase::Available) => (
            "Normal",
            "Available",
            "the storage location is reachable and valid",
        ),
        _ => ("Warning", "Unavailable", message),
    };
    let namespace = obj.namespace().unwrap_or_default();
    let event = KubeEvent {
        metadata: ObjectMeta {
            // A trailing dash is the one character a name prefix may end with.
            generate_name: Some(format!("{}-", obj.name_any())),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(Timestamp::now())),
        type_: Some(type_.into()),
        reason: Some(reason.into()),
        note: Some(note.chars().take(1024).collect()),
        action: Some("Validate".into()),
        regarding: Some(obj.object_ref(&())),
        reporting_controller: Some("bsl-sentinel".into()),
        reporting_instance: Some(ctx.config.identity.clone()),
        ..KubeEvent::default()
    };
    let api: Api<KubeEvent> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(error = %e, "cannot record an event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_for_failures_and_recoveries_only() {
        use Phase::*;
        assert!(newsworthy(Some(Available), Some(Unavailable)));
        assert!(newsworthy(Some(Unavailable), Some(Available)));
        assert!(newsworthy(None, Some(Unavailable)));
        assert!(newsworthy(Some(Unknown), Some(Unavailable)));
        assert!(!newsworthy(None, Some(Available)));
        assert!(!newsworthy(Some(Unknown), Some(Available)));
        assert!(!newsworthy(Some(Available), Some(Available)));
        assert!(!newsworthy(Some(Unavailable), Some(Unavailable)));
        assert!(!newsworthy(Some(Available), None));
        assert!(!newsworthy(Some(Unavailable), None));
    }
}
