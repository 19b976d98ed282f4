//! What the BSL CRD served by this cluster allows, read from the CRD object itself: Velero's
//! stock CRD rejects phase `Unknown` and has no status subresource; the project's allows
//! `Unknown`; a future CRD may add the subresource. bsl-sentinel adapts instead of assuming.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::bsl::{Phase, VERSION};

/// What the served CRD allows, shared by the webhook and the reconciler; `None` until it was
/// first read.
pub type SharedServedCrd = Arc<ArcSwap<Option<ServedCrd>>>;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServedCrd {
    /// The phase enum (if any) accepts `Unknown`.
    pub unknown_phase_allowed: bool,
    /// Status is written through `/status`, and `.status` sent on create is dropped.
    pub status_subresource: bool,
}

impl ServedCrd {
    /// Reads the served v1 version. A CRD without v1 yields the conservative default: no
    /// `Unknown`, no subresource (what Velero's CRD does).
    pub fn from_crd(crd: &CustomResourceDefinition) -> Self {
        let Some(version) = crd.spec.versions.iter().find(|v| v.name == VERSION) else {
            return ServedCrd::default();
        };
        let phase = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|root| root.properties.as_ref()?.get("status"))
            .and_then(|status| status.properties.as_ref()?.get("phase"));
        let unknown_phase_allowed = match phase.and_then(|p| p.enum_.as_ref()) {
            Some(values) => values.iter().any(|v| v.0 == Phase::Unknown.as_str()),
            // No enum constrains it: any string goes.
            None => phase.is_some(),
        };
        let status_subresource = version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some());
        ServedCrd {
            unknown_phase_allowed,
            status_subresource,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceSubresourceStatus;

    #[test]
    fn project_crd_allows_unknown_without_subresource() {
        let served = ServedCrd::from_crd(&crate::crd::crd());
        assert_eq!(
            served,
            ServedCrd {
                unknown_phase_allowed: true,
                status_subresource: false
            }
        );
    }

    #[test]
    fn velero_enum_rejects_unknown() {
        let mut crd = crate::crd::crd();
        let phase = crd.spec.versions[0]
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|r| r.properties.as_mut()?.get_mut("status"))
            .and_then(|s| s.properties.as_mut()?.get_mut("phase"));
        if let Some(enum_) = phase.and_then(|p| p.enum_.as_mut()) {
            enum_.retain(|v| v.0 != "Unknown");
        }
        assert!(!ServedCrd::from_crd(&crd).unknown_phase_allowed);
    }

    #[test]
    fn detects_status_subresource() {
        let mut crd = crate::crd::crd();
        crd.spec.versions[0]
            .subresources
            .get_or_insert_default()
            .status = Some(CustomResourceSubresourceStatus(serde_json::json!({})));
        assert!(ServedCrd::from_crd(&crd).status_subresource);
    }

    #[test]
    fn missing_version_is_conservative() {
        let mut crd = crate::crd::crd();
        crd.spec.versions[0].name = "v2".into();
        assert_eq!(ServedCrd::from_crd(&crd), ServedCrd::default());
    }
}
