//! Helpers for the rules' tests, shared by the rule engine's and the providers' modules.

use super::{Report, validate};
use crate::bsl::{BackupStorageLocationSpec, ObjectStorageLocation, SecretKeySelector};

pub(crate) const PEM_END: &str = "-----END CERTIFICATE-----";

pub(crate) fn spec(provider: &str, bucket: &str) -> BackupStorageLocationSpec {
    BackupStorageLocationSpec {
        provider: provider.into(),
        object_storage: ObjectStorageLocation {
            bucket: bucket.into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

pub(crate) fn with_config(
    mut s: BackupStorageLocationSpec,
    kv: &[(&str, &str)],
) -> BackupStorageLocationSpec {
    s.config = Some(
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    s
}

pub(crate) fn azure(kv: &[(&str, &str)]) -> BackupStorageLocationSpec {
    let mut all = vec![("storageAccount", "sa")];
    all.extend_from_slice(kv);
    with_config(spec("azure", "c"), &all)
}

pub(crate) fn selector(name: Option<&str>, key: &str) -> SecretKeySelector {
    SecretKeySelector {
        key: key.into(),
        name: name.map(Into::into),
        optional: None,
    }
}

pub(crate) fn messages(r: &Report) -> Vec<String> {
    r.errors.iter().map(ToString::to_string).collect()
}

pub(crate) fn paths(r: &Report) -> Vec<&str> {
    r.errors.iter().map(|e| e.path.as_str()).collect()
}

pub(crate) fn assert_clean(s: &BackupStorageLocationSpec) {
    let r = validate(s);
    assert_eq!(r, Report::default(), "{s:?}");
}

pub(crate) fn cert_pem() -> String {
    match rcgen::generate_simple_self_signed(vec!["ca.example".to_string()]) {
        Ok(c) => c.cert.pem(),
        Err(e) => panic!("rcgen: {e}"),
    }
}
