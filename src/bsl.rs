//! Velero's velero.io/v1 BackupStorageLocation, field for field as in Velero v1.18.
//!
//! Spec fields that Velero constrains with an enum or a format stay plain strings here, so that a
//! malformed manifest still decodes and the rule engine can name every bad field at once; the CRD
//! schema carries the enums.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use kube::api::{ApiResource, GroupVersionKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// A BSL as the watches keep it (the reconciler's store and the webhook's cache): what they
/// read, decoded once per object version. Decoding never fails on the body, so one malformed
/// BSL (Velero's CRD admits them without the webhook) never breaks the list of the others;
/// its spec error is kept for its status. Nothing writes this type back: status is patched.
#[derive(Clone, Debug)]
pub struct StoredBsl {
    pub metadata: ObjectMeta,
    /// The spec, or why it cannot be read.
    pub spec: Result<BackupStorageLocationSpec, String>,
    /// The spec as the apiserver sent it (compact JSON), for the status patch's test; None
    /// when the BSL has none.
    pub spec_json: Option<Box<str>>,
    /// Of the spec's content, never of metadata.generation (which Velero's CRD bumps on every
    /// status write): a change brings a check.
    pub spec_hash: u64,
    /// spec.default and spec.validationFrequency as sent, read even from a spec that does not
    /// decode (as before the webhook, such a BSL still counts and is scheduled by them).
    pub default: bool,
    pub validation_frequency: Option<String>,
    pub status: StoredStatus,
}

/// The status fields bsl-sentinel reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredStatus {
    /// status is an object (else a patch adds the whole of it).
    pub present: bool,
    /// None for a missing phase or one this build does not know.
    pub phase: Option<Phase>,
    pub last_validation_time: Option<String>,
    pub message: Option<String>,
}

impl StoredBsl {
    /// Decodes what the apiserver sent; `spec` and `status` as JSON values, Null when absent.
    pub fn from_parts(metadata: ObjectMeta, spec: Value, status: Value) -> StoredBsl {
        let spec_json = (!spec.is_null()).then(|| spec.to_string().into_boxed_str());
        let spec_hash = {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            spec.to_string().hash(&mut hasher);
            hasher.finish()
        };
        let text = |field: &str| status[field].as_str().map(String::from);
        let stored = StoredStatus {
            present: status.is_object(),
            phase: serde_json::from_value(status["phase"].clone()).ok(),
            last_validation_time: text("lastValidationTime"),
            message: text("message"),
        };
        StoredBsl {
            metadata,
            default: spec["default"] == Value::Bool(true),
            validation_frequency: spec["validationFrequency"].as_str().map(String::from),
            spec: serde_json::from_value(spec).map_err(|e| e.to_string()),
            spec_json,
            spec_hash,
            status: stored,
        }
    }
}

impl<'de> Deserialize<'de> for StoredBsl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Parts {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Value,
            #[serde(default)]
            status: Value,
        }
        let parts = Parts::deserialize(deserializer)?;
        Ok(StoredBsl::from_parts(
            parts.metadata,
            parts.spec,
            parts.status,
        ))
    }
}

/// `kube::Resource` for the lean StoredBsl, so that the watches read only what they use
/// under Velero's kind.
impl kube::Resource for StoredBsl {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "BackupStorageLocation".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(body: Value) -> StoredBsl {
        serde_json::from_value(body).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_malformed_bsl_still_decodes_with_its_spec_error() {
        let bsl = stored(json!({
            "metadata": {"name": "old", "namespace": "velero"},
            "spec": {"provider": 5},
            "status": {"phase": "Sideways", "message": "m"}
        }));
        assert!(bsl.spec.is_err());
        assert!(!bsl.default);
        assert_eq!(bsl.status.phase, None);
        assert_eq!(bsl.status.message.as_deref(), Some("m"));
        assert!(bsl.status.present);
        let bare = stored(json!({"metadata": {"name": "bare"}}));
        assert!(bare.spec.is_err());
        assert_eq!(bare.spec_json, None);
        assert!(!bare.status.present);
    }

    #[test]
    fn stored_bsls_keep_what_the_reconciler_reads() {
        let bsl = stored(json!({
            "metadata": {"name": "b"},
            "spec": {"provider": "aws", "objectStorage": {"bucket": "b"}, "default": true, "x": 1},
            "status": {"phase": "Available", "lastValidationTime": "2026-12-02T10:11:12Z"}
        }));
        assert!(bsl.default);
        assert_eq!(bsl.status.phase, Some(Phase::Available));
        assert_eq!(
            bsl.status.last_validation_time.as_deref(),
            Some("2026-12-02T10:11:12Z")
        );
        // Unknown spec fields stay in what the status patch tests against.
        let spec: Value =
            serde_json::from_str(bsl.spec_json.as_deref().unwrap_or_default()).unwrap_or_default();
        assert_eq!(spec["x"], json!(1));
    }

    #[test]
    fn spec_hash_depends_only_on_content() {
        let hash =
            |spec: Value| StoredBsl::from_parts(ObjectMeta::default(), spec, Value::Null).spec_hash;
        let a = json!({"provider": "aws", "objectStorage": {"bucket": "b"}});
        let b = json!({"objectStorage": {"bucket": "b"}, "provider": "aws"});
        assert_eq!(hash(a.clone()), hash(b));
        assert_ne!(
            hash(a),
            hash(json!({"provider": "aws", "objectStorage": {"bucket": "c"}}))
        );
    }
}
