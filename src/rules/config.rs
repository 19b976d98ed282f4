//! The engine's judgement of spec.config: the keys Velero overwrites, the keys a known plugin
//! accepts (it fails on any other), and the helpers the providers' checks share.

use super::report::Report;
use crate::bsl::BackupStorageLocationSpec;
use crate::provider::{self, Config, Provider, parse_go_bool, value};

/// Keys Velero itself puts into every plugin's config.
const VELERO_KEYS: [&str; 4] = ["bucket", "prefix", "caCert", "credentialsFile"];

pub(crate) fn config_path(key: &str) -> String {
    format!("spec.config.{key}")
}

pub(crate) fn check_config(
    spec: &BackupStorageLocationSpec,
    config: &Config,
    provider: Option<Provider>,
    r: &mut Report,
) {
    // Velero overwrites these before calling the plugin, so a value here never takes effect.
    let replaced = [
        ("bucket", "spec.objectStorage.bucket", true),
        ("prefix", "spec.objectStorage.prefix", true),
        (
            "caCert",
            "spec.objectStorage.caCert",
            spec.object_storage.ca_cert.is_some(),
        ),
        (
            "credentialsFile",
            "the file from spec.credential",
            spec.credential.is_some(),
        ),
    ];
    for (key, by, applies) in replaced {
        if applies && config.contains_key(key) {
            r.warn(
                &config_path(key),
                format_args!("ignored; Velero replaces it with {by}"),
            );
        }
    }
    let Some(provider) = provider else {
        return;
    };
    let known = |key: &str| provider.config_keys().contains(&key) || VELERO_KEYS.contains(&key);
    // The sorted list of valid keys is built only for an error that shows it.
    for key in config.keys().filter(|k| !known(k)) {
        let mut allowed: Vec<&str> = provider
            .config_keys()
            .iter()
            .chain(&VELERO_KEYS)
            .copied()
            .collect();
        allowed.sort_unstable();
        let hint = format!(
            "the {} plugin fails on any other key (\"config has invalid keys\")",
            provider.plugin_name()
        );
        r.not_supported(config_path(key), key, &allowed, &hint);
    }
    provider.check_config(config, r);
}

const BOOL_HINT: &str =
    "must be a boolean: true, false, 1, 0, t, f, T, F, TRUE, FALSE, True or False";

/// A boolean the plugin parses with Go's strconv.ParseBool; its value, when it is one.
pub(crate) fn check_bool(config: &Config, key: &str, r: &mut Report) -> Option<bool> {
    let v = value(config, key)?;
    let parsed = parse_go_bool(v);
    if parsed.is_none() {
        r.invalid(config_path(key), v, BOOL_HINT);
    }
    parsed
}

/// An endpoint URL, judged as the probe will use it.
pub(crate) fn check_url(config: &Config, key: &str, r: &mut Report) {
    if let Some(v) = value(config, key)
        && let Err(why) = provider::http_url(v)
    {
        r.invalid(config_path(key), v, why);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::validate;
    use crate::rules::report::ErrorKind;
    use k8s_openapi::ByteString;

    #[test]
    fn unknown_config_keys_list_the_valid_ones() {
        let r = validate(&with_config(
            spec("gcp", "b"),
            &[("region", "x"), ("serviceAccount", "sa")],
        ));
        assert_eq!(
            messages(&r),
            [
                r#"spec.config.region: Unsupported value: "region": supported values: "bucket", "caCert", "credentialsFile", "kmsKeyName", "prefix", "serviceAccount", "storeEndpoint"; the velero.io/gcp plugin fails on any other key ("config has invalid keys")"#
            ]
        );
        let r = validate(&with_config(
            spec("aws", "b"),
            &[("regoin", "x"), ("foo", "y")],
        ));
        assert_eq!(paths(&r), ["spec.config.foo", "spec.config.regoin"]);
        let ErrorKind::NotSupported { allowed, .. } = &r.errors[0].kind else {
            panic!("{r:?}");
        };
        assert!(allowed.is_sorted() && allowed.len() == 17, "{allowed:?}");
        // Other plugins' config is theirs to check.
        assert_clean(&with_config(
            spec("example.io/p", "b"),
            &[("anything", "goes")],
        ));
    }

    #[test]
    fn overwritten_config_keys_warn() {
        let mut s = with_config(
            spec("example.io/p", "b"),
            &[
                ("bucket", "x"),
                ("prefix", "y"),
                ("credentialsFile", "/f"),
                ("caCert", "z"),
            ],
        );
        let r = validate(&s);
        assert_eq!(
            r.warnings,
            [
                "spec.config.bucket: ignored; Velero replaces it with spec.objectStorage.bucket",
                "spec.config.prefix: ignored; Velero replaces it with spec.objectStorage.prefix",
            ]
        );
        s.credential = Some(selector(Some("c"), "k"));
        s.object_storage.ca_cert = Some(ByteString(cert_pem().into_bytes()));
        assert_eq!(validate(&s).warnings.len(), 5);
    }
}
