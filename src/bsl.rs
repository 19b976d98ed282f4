//! Velero's velero.io/v1 BackupStorageLocation, field for field as in Velero v1.18.
//!
//! Spec fields that Velero constrains with an enum or a format stay plain strings here, so that a
//! malformed manifest still decodes and the rule engine can name every bad field at once; the CRD
//! schema carries the enums.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use kube::api::{ApiResource, GroupVersionKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "velero.io";
pub const VERSION: &str = "v1";
pub const PLURAL: &str = "backupstoragelocations";
pub const CRD_NAME: &str = "backupstoragelocations.velero.io";

/// velero.io/v1 backupstoragelocations, for the APIs that read BSLs untyped.
pub fn bsl_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, "BackupStorageLocation");
    ApiResource::from_gvk_with_plural(&gvk, PLURAL)
}

/// BackupStorageLocationSpec defines the desired state of a Velero BackupStorageLocation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "BackupStorageLocation",
    plural = "backupstoragelocations",
    shortname = "bsl",
    namespaced,
    status = "BackupStorageLocationStatus",
    schema = "derived",
    doc = "BackupStorageLocation is a location where Velero stores backup objects",
    printcolumn = r#"{"name":"Phase","type":"string","description":"Backup Storage Location status such as Available/Unavailable","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Last Validated","type":"date","description":"LastValidationTime is the last time the backup store location was validated","jsonPath":".status.lastValidationTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Default","type":"boolean","description":"Default backup storage location","jsonPath":".spec.default"}"#,
    printcolumn = r#"{"name":"Message","type":"string","description":"Why the location is not available","jsonPath":".status.message","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BackupStorageLocationSpec {
    /// Provider is the provider of the backup storage.
    pub provider: String,

    /// Config is for provider-specific configuration fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<BTreeMap<String, String>>,

    /// Credential contains the credential information intended to be used with this location
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<SecretKeySelector>,

    /// ObjectStorageLocation specifies the settings necessary to connect to a provider's object
    /// storage.
    pub object_storage: ObjectStorageLocation,

    /// Default indicates this location is the default backup storage location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,

    /// AccessMode defines the permissions for the backup storage location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ReadOnly", "ReadWrite"]))]
    pub access_mode: Option<String>,

    /// BackupSyncPeriod defines how frequently to sync backup API objects from object storage.
    /// A value of 0 disables sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_sync_period: Option<String>,

    /// ValidationFrequency defines how frequently to validate the corresponding object storage.
    /// A value of 0 disables validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_frequency: Option<String>,
}

/// ObjectStorageLocation specifies the settings necessary to connect to a provider's object
/// storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStorageLocation {
    /// Bucket is the bucket to use for object storage.
    pub bucket: String,

    /// Prefix is the path inside a bucket to use for Velero storage. Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,

    /// CACert defines a CA bundle to use when verifying TLS connections to the provider.
    /// Deprecated: Use CACertRef instead.
    #[serde(default, rename = "caCert", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "byte_string_schema")]
    pub ca_cert: Option<ByteString>,

    /// CACertRef is a reference to a Secret containing the CA certificate bundle to use when
    /// verifying TLS connections to the provider. The Secret must be in the same namespace as the
    /// BackupStorageLocation.
    #[serde(default, rename = "caCertRef", skip_serializing_if = "Option::is_none")]
    pub ca_cert_ref: Option<SecretKeySelector>,
}

/// A key of a Secret in the BSL's namespace. Velero's CRD requires only `key` and defaults
/// `name` to "", so `name` stays optional here to accept everything Velero accepts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct SecretKeySelector {
    /// The key of the secret to select from.  Must be a valid secret key.
    pub key: String,

    /// Name of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = ""))]
    pub name: Option<String>,

    /// Specify whether the Secret or its key must be defined
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

impl SecretKeySelector {
    /// The Secret's name; empty when unset, as Velero reads it.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }
}

/// Go's []byte: base64 text in JSON.
fn byte_string_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "format": "byte" })
}

/// The phase Velero reads: backups go only to an Available location. `Unknown` is
/// bsl-sentinel's own, stamped at create time where the served CRD allows it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    Available,
    Unavailable,
    Unknown,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Available => "Available",
            Phase::Unavailable => "Unavailable",
            Phase::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// BackupStorageLocationStatus defines the observed state of BackupStorageLocation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStorageLocationStatus {
    /// Phase is the current state of the BackupStorageLocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// LastSyncedTime is the last time the contents of the location were synced into the
    /// cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_synced_time: Option<Time>,

    /// LastSyncedRevision is the value of the `metadata/revision` file in the backup storage
    /// location the last time the BSL's contents were synced into the cluster.
    /// Deprecated: no longer updated or used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_synced_revision: Option<String>,

    /// LastValidationTime is the last time the backup store location was validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_validation_time: Option<Time>,

    /// Message is a message about the backup storage location's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// AccessMode is an unused field. Deprecated: there is now an AccessMode field on the Spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ReadOnly", "ReadWrite"]))]
    pub access_mode: Option<String>,
}

impl BackupStorageLocation {
    pub fn phase(&self) -> Option<Phase> {
        self.status.as_ref().and_then(|s| s.phase)
    }
}
