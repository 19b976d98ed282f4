//! The project's CRD, generated from the Rust types: a superset of Velero's (every field, same
//! types) whose phase enum also allows `Unknown`.
//!
//! It deliberately has NO status subresource, exactly like Velero's own CRD:
//! - Velero's server writes status with a merge patch on the main resource; with a status
//!   subresource those writes would be silently dropped and Velero would never see a phase.
//! - The initial `Unknown` phase is stamped by the mutating webhook at create time; the
//!   apiserver drops `.status` on create when the subresource exists.
//!
//! The cost, shared with Velero, is that status writes bump metadata.generation, so "spec
//! changed" is decided by comparing specs, never generations.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceSubresources, JSONSchemaProps,
};
use kube::CustomResourceExt;

use crate::bsl::BackupStorageLocation;

/// The fields Velero's CRD marks nullable (Go pointers to Duration and Time). A Rust Option
/// means "may be omitted", which the generated schema renders as nullable everywhere; keeping
/// nullable only here makes the apiserver treat null exactly as on Velero's CRD.
const NULLABLE: [&str; 4] = [
    "backupSyncPeriod",
    "validationFrequency",
    "lastSyncedTime",
    "lastValidationTime",
];

pub fn crd() -> CustomResourceDefinition {
    let mut crd = BackupStorageLocation::crd();
    for version in &mut crd.spec.versions {
        version.subresources = Some(CustomResourceSubresources::default());
        if let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            // Velero's CRD does not require spec either; its required fields live inside spec.
            root.required = None;
            match_velero_nullability(root);
        }
    }
    crd
}

fn match_velero_nullability(schema: &mut JSONSchemaProps) {
    for (name, prop) in schema.properties.iter_mut().flatten() {
        if !NULLABLE.contains(&name.as_str()) {
            prop.nullable = None;
            if let Some(values) = prop.enum_.as_mut() {
                values.retain(|v| !v.0.is_null());
            }
        }
        match_velero_nullability(prop);
    }
}

pub fn crd_yaml() -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(&crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> serde_json::Value {
        let crd = crd();
        let schema = crd.spec.versions[0].schema.as_ref();
        serde_json::to_value(schema.and_then(|s| s.open_api_v3_schema.as_ref())).unwrap_or_default()
    }

    #[test]
    fn phase_enum_allows_unknown() {
        let phase = &schema()["properties"]["status"]["properties"]["phase"];
        assert_eq!(
            phase["enum"],
            serde_json::json!(["Available", "Unavailable", "Unknown"])
        );
    }

    #[test]
    fn has_no_status_subresource() {
        let crd = crd();
        let sub = crd.spec.versions[0].subresources.as_ref();
        assert!(sub.is_some_and(|s| s.status.is_none() && s.scale.is_none()));
    }

    #[test]
    fn names_match_velero() {
        let crd = crd();
        assert_eq!(crd.metadata.name.as_deref(), Some(crate::bsl::CRD_NAME));
        assert_eq!(crd.spec.names.short_names, Some(vec!["bsl".to_string()]));
        assert_eq!(crd.spec.scope, "Namespaced");
    }

    #[test]
    fn yaml_round_trips() {
        let yaml = crd_yaml().map_err(|e| e.to_string());
        let back: Result<CustomResourceDefinition, _> =
            serde_saphyr::from_str(yaml.as_deref().unwrap_or_default());
        assert_eq!(back.ok(), Some(crd()));
    }
}
