//! The rule engine: pure checks of a BackupStorageLocation against what Velero and its aws, gcp
//! and azure plugins accept, reporting every problem at once in Kubernetes' field.Error style.
//! Shared by the admission webhook, the reconciler and the offline CLI. What each plugin accepts
//! in its config is the provider's own ([`crate::provider`]); the engine judges the rest.
//!
//! Principle: reject only what cannot work once Velero picks it up; when unsure, warn.

mod ca_cert;
pub(crate) mod config;
mod input;
mod names;
pub(crate) mod report;
mod shapes;
#[cfg(test)]
pub(crate) mod testing;

use k8s_openapi::ByteString;
use serde::Deserialize;
use serde_json::Value;

pub use input::{Head, Spec};
pub use report::{ErrorKind, FieldError, Report};

use crate::bsl::{BackupStorageLocationSpec, ObjectStorageLocation};
use crate::duration::GoDuration;
use crate::provider::{Config, Provider, aws, known_provider};
use names::{check_secret_ref, dns_subdomain};
use report::short_n;
use shapes::{SPEC, Shape, check_const, check_shape, json_text};

/// Checks a decoded spec; returns every error and warning, not just the first.
pub fn validate(spec: &BackupStorageLocationSpec) -> Report {
    let mut r = Report::default();
    let provider = known_provider(&spec.provider);
    check_provider(&spec.provider, &mut r);
    check_object_storage(&spec.object_storage, provider, &mut r);
    if let Some(credential) = &spec.credential {
        check_secret_ref(
            credential,
            "spec.credential",
            "the credentials file",
            &mut r,
        );
    }
    if let Some(mode) = spec.access_mode.as_deref()
        && !matches!(mode, "" | "ReadWrite" | "ReadOnly")
    {
        r.not_supported("spec.accessMode", mode, &["ReadOnly", "ReadWrite"], "");
    }
    check_duration(
        spec.backup_sync_period.as_deref(),
        "spec.backupSyncPeriod",
        &mut r,
    );
    let frequency = spec.validation_frequency.as_deref();
    if check_duration(frequency, "spec.validationFrequency", &mut r)
        .is_some_and(GoDuration::is_zero)
    {
        r.warn(
            "spec.validationFrequency",
            "0 turns periodic validation off; Velero validates the location only once",
        );
    }
    // An absent config is still checked: the azure plugin cannot work without one.
    config::check_config(
        spec,
        spec.config.as_ref().unwrap_or(&Config::new()),
        provider,
        &mut r,
    );
    r
}

fn check_provider(provider: &str, r: &mut Report) {
    const PATH: &str = "spec.provider";
    if provider.is_empty() {
        r.error(
            PATH,
            ErrorKind::Required,
            "set the object store plugin: aws, gcp, azure, or <domain>/<name> for another plugin",
        );
        return;
    }
    // Velero prefixes a bare name with "velero.io/"; plugins register as <DNS subdomain>/<name>.
    let (domain, name) = provider.split_once('/').unwrap_or(("velero.io", provider));
    let problem = if name.contains('/') {
        Some("must be <name> or <domain>/<name>, with at most one '/'".to_string())
    } else if domain.is_empty() || name.is_empty() {
        Some(
            "both parts of <domain>/<name> must be non-empty, e.g. example.io/my-plugin"
                .to_string(),
        )
    } else if let Err(why) = dns_subdomain(domain) {
        Some(format!("the plugin domain {domain:?} {why}"))
    } else {
        None
    };
    match problem {
        Some(detail) => r.invalid(PATH, provider, detail),
        // Velero accepts any plugin name, so unusual characters only warn: likely a typo.
        None if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)) =>
        {
            r.warn(
                PATH,
                format_args!(
                    "plugin name {:?} has characters outside [a-z0-9._-]; names are case-sensitive",
                    short_n(name, 20)
                ),
            );
        }
        None => {}
    }
}

fn check_object_storage(os: &ObjectStorageLocation, provider: Option<Provider>, r: &mut Report) {
    check_bucket(&os.bucket, provider, r);
    if os.ca_cert.is_some() && os.ca_cert_ref.is_some() {
        r.error(
            "spec.objectStorage",
            ErrorKind::Forbidden,
            "cannot specify both caCert and caCertRef in objectStorage; remove caCert and keep caCertRef",
        );
    }
    if let Some(ByteString(pem)) = &os.ca_cert {
        ca_cert::check_ca_cert(pem, r);
    }
    if let Some(selector) = &os.ca_cert_ref {
        check_secret_ref(selector, "spec.objectStorage.caCertRef", "the CA bundle", r);
    }
}

fn check_bucket(bucket: &str, provider: Option<Provider>, r: &mut Report) {
    const PATH: &str = "spec.objectStorage.bucket";
    // Velero trims slashes at both ends before using the bucket.
    let trimmed = bucket.trim_matches('/');
    // GCS and Azure names cannot hold an ARN; aws and third-party S3 plugins may take an MRAP.
    let arn_ok =
        aws::is_mrap_arn(trimmed) && !matches!(provider, Some(Provider::Gcp | Provider::Azure));
    if bucket.is_empty() {
        r.error(
            PATH,
            ErrorKind::Required,
            "set the bucket (the blob container, for Azure) that holds the backups",
        );
    } else if trimmed.is_empty() {
        r.invalid(PATH, bucket, "must name a bucket, not only '/'");
    } else if trimmed.contains('/') && !arn_ok {
        r.invalid(
            PATH,
            bucket,
            "bucket must not contain '/'; if using a prefix, put it in spec.objectStorage.prefix instead",
        );
    }
}

fn check_duration(value: Option<&str>, path: &str, r: &mut Report) -> Option<GoDuration> {
    let value = value?;
    match GoDuration::parse(value) {
        Err(e) => {
            let hint = "use a Go duration such as \"1m30s\", \"1h\" or \"0\"";
            r.invalid(path, value, format!("{e}; {hint}"));
            None
        }
        Ok(d) if d.is_negative() => {
            let detail =
                "must not be negative; use 0 to disable or a positive duration such as \"1h\"";
            r.invalid(path, value, detail);
            None
        }
        Ok(d) => Some(d),
    }
}

/// Checks a whole manifest as the offline CLI reads it: type, name, then the spec.
pub fn validate_document(doc: &Value) -> Report {
    validate_parts(&Head::of(doc), &Spec::from_value(doc.get("spec")))
}

/// The same for a document read in two parts, as the webhook reads it.
pub fn validate_parts(head: &Head, spec: &Spec) -> Report {
    let mut r = Report::default();
    check_const(head.api_version, "apiVersion", "velero.io/v1", &mut r);
    check_const(head.kind, "kind", "BackupStorageLocation", &mut r);
    match head.name.filter(|v| !v.is_null() && v.as_str() != Some("")) {
        None => r.error(
            "metadata.name",
            ErrorKind::Required,
            "name the BackupStorageLocation",
        ),
        Some(Value::String(name)) => {
            if let Err(why) = dns_subdomain(name) {
                r.invalid("metadata.name", name, why);
            }
        }
        Some(v) => r.invalid("metadata.name", &json_text(v), "must be a string"),
    }
    let decoded;
    let typed = match spec {
        Spec::Missing => {
            r.error(
                "spec",
                ErrorKind::Required,
                "set spec with at least provider and objectStorage.bucket",
            );
            return r;
        }
        Spec::Typed(spec) => spec,
        Spec::Json(spec) => {
            let before = r.errors.len();
            check_shape(spec, Shape::Obj(SPEC), "spec", &mut r);
            if r.errors.len() > before {
                return r;
            }
            match BackupStorageLocationSpec::deserialize(spec.as_ref()) {
                Ok(spec) => {
                    decoded = spec;
                    &decoded
                }
                // Only reachable if the shape tables drift from crate::bsl.
                Err(e) => {
                    r.invalid("spec", &json_text(spec), e.to_string());
                    return r;
                }
            }
        }
    };
    let rules = validate(typed);
    r.errors.extend(rules.errors);
    r.warnings.extend(rules.warnings);
    r
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::ca_cert::PEM_BEGIN;
    use super::testing::*;
    use super::*;

    #[test]
    fn minimal_specs_are_clean() {
        for s in [
            spec("aws", "b"),
            spec("velero.io/aws", "b"),
            spec("gcp", "b"),
            spec("velero.io/gcp", "b"),
            azure(&[]),
            spec("example.io/my-plugin", "b"),
            spec("velero.io/csi", "b"),
        ] {
            assert_clean(&s);
        }
    }

    #[test]
    fn provider_rules() {
        assert_eq!(
            messages(&validate(&spec("", "b"))),
            [
                "spec.provider: Required value: set the object store plugin: aws, gcp, azure, or <domain>/<name> for another plugin"
            ]
        );
        for bad in [
            "a/b/c",
            "/aws",
            "example.io/",
            "Example.io/x",
            "exa_mple.io/x",
            "-x.io/p",
        ] {
            assert_eq!(
                paths(&validate(&spec(bad, "b"))),
                ["spec.provider"],
                "{bad}"
            );
        }
        assert_eq!(
            messages(&validate(&spec("a/b/c", "b"))),
            [
                r#"spec.provider: Invalid value: "a/b/c": must be <name> or <domain>/<name>, with at most one '/'"#
            ]
        );
        let r = validate(&spec("AWS", "b"));
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings,
            [
                r#"spec.provider: plugin name "AWS" has characters outside [a-z0-9._-]; names are case-sensitive"#
            ]
        );
    }

    #[test]
    fn bucket_rules() {
        assert_eq!(
            messages(&validate(&spec("aws", ""))),
            [
                "spec.objectStorage.bucket: Required value: set the bucket (the blob container, for Azure) that holds the backups"
            ]
        );
        assert_eq!(
            messages(&validate(&spec("aws", "a/b"))),
            [
                r#"spec.objectStorage.bucket: Invalid value: "a/b": bucket must not contain '/'; if using a prefix, put it in spec.objectStorage.prefix instead"#
            ]
        );
        assert_clean(&spec("aws", "/bucket/"));
        assert_eq!(
            paths(&validate(&spec("aws", "//"))),
            ["spec.objectStorage.bucket"]
        );
        let mrap = "arn:aws:s3::123456789012:accesspoint/mfzwi23gnjvgw.mrap";
        assert_clean(&spec("aws", mrap));
        assert_clean(&spec("example.io/s3", mrap));
        assert_eq!(
            paths(&validate(&spec("gcp", mrap))),
            ["spec.objectStorage.bucket"]
        );
        for bad in [
            "arn:aws:s3::12345:accesspoint/x",
            "arn:aws:s3:us-east-1:123456789012:accesspoint/x",
            "arn:aws:s3::123456789012:accesspoint/a/b",
        ] {
            assert_eq!(
                paths(&validate(&spec("aws", bad))),
                ["spec.objectStorage.bucket"],
                "{bad}"
            );
        }
    }

    #[test]
    fn access_mode_rules() {
        for ok in [None, Some(""), Some("ReadWrite"), Some("ReadOnly")] {
            let mut s = spec("aws", "b");
            s.access_mode = ok.map(Into::into);
            assert_clean(&s);
        }
        let mut s = spec("aws", "b");
        s.access_mode = Some("Foo".into());
        assert_eq!(
            messages(&validate(&s)),
            [
                r#"spec.accessMode: Unsupported value: "Foo": supported values: "ReadOnly", "ReadWrite""#
            ]
        );
    }

    #[test]
    fn duration_rules() {
        let with = |sync: &str, freq: &str| {
            let mut s = spec("aws", "b");
            s.backup_sync_period = Some(sync.into());
            s.validation_frequency = Some(freq.into());
            validate(&s)
        };
        assert_eq!(with("1m30s", "1h"), Report::default());
        assert_eq!(with("0", "10m"), Report::default());
        let r = with("1d", "-1s");
        assert_eq!(
            messages(&r),
            [
                r#"spec.backupSyncPeriod: Invalid value: "1d": time: unknown unit "d" in duration "1d"; use a Go duration such as "1m30s", "1h" or "0""#,
                r#"spec.validationFrequency: Invalid value: "-1s": must not be negative; use 0 to disable or a positive duration such as "1h""#,
            ]
        );
        assert_eq!(paths(&with("", "1h")), ["spec.backupSyncPeriod"]);
        let r = with("1m", "0s");
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings,
            [
                "spec.validationFrequency: 0 turns periodic validation off; Velero validates the location only once"
            ]
        );
    }

    #[test]
    fn reports_every_bad_field() {
        let mut s = with_config(
            spec("velero.io/aws", "x/y"),
            &[("s3Url", "nope"), ("bogus", "1"), ("signatureVersion", "9")],
        );
        s.object_storage.ca_cert = Some(ByteString(b"junk".to_vec()));
        s.object_storage.ca_cert_ref = Some(selector(None, ""));
        s.credential = Some(selector(Some("UPPER"), ""));
        s.access_mode = Some("Write".into());
        s.backup_sync_period = Some("5 minutes".into());
        s.validation_frequency = Some("-1m".into());
        let r = validate(&s);
        assert_eq!(
            paths(&r),
            [
                "spec.objectStorage.bucket",
                "spec.objectStorage",
                "spec.objectStorage.caCert",
                "spec.objectStorage.caCertRef.name",
                "spec.objectStorage.caCertRef.key",
                "spec.credential.name",
                "spec.credential.key",
                "spec.accessMode",
                "spec.backupSyncPeriod",
                "spec.validationFrequency",
                "spec.config.bogus",
                "spec.config.s3Url",
                "spec.config.signatureVersion",
            ]
        );
        s.provider = String::new();
        // Without a known provider the config goes unchecked.
        assert_eq!(validate(&s).errors.len(), 11);
    }

    #[test]
    fn warnings_are_short_single_lines() {
        let long = "example.io/Plugin_WITH_a_long_name_that_goes_on_and_on_and_on_and_on_forever";
        let mut s = with_config(
            spec(long, "b"),
            &[
                ("bucket", "x"),
                ("prefix", "y"),
                ("credentialsFile", "/f"),
                ("caCert", "z"),
            ],
        );
        s.credential = Some(selector(Some("c"), "k"));
        s.object_storage.ca_cert = Some(ByteString(
            format!("{}{PEM_BEGIN}\n!\n{PEM_END}", cert_pem()).into_bytes(),
        ));
        s.validation_frequency = Some("0".into());
        let mut r = validate(&s);
        let az = validate(&azure(&[("blockSizeInBytes", &"9".repeat(500))]));
        let aws = validate(&with_config(
            spec("aws", "b"),
            &[("insecureSkipTLSVerify", "1")],
        ));
        let unknown = validate_document(
            &json!({"spec": {"provider": "aws", "objectStorage": {"bucket": "b", "caCertReff": {}}}}),
        );
        r.warnings.extend(
            az.warnings
                .into_iter()
                .chain(aws.warnings)
                .chain(unknown.warnings),
        );
        assert_eq!(r.warnings.len(), 11, "{:#?}", r.warnings);
        for w in &r.warnings {
            assert!(w.len() <= 120 && !w.contains('\n'), "{w} ({})", w.len());
        }
    }

    fn document(spec: Value) -> Value {
        json!({
            "apiVersion": "velero.io/v1",
            "kind": "BackupStorageLocation",
            "metadata": {"name": "default", "namespace": "velero"},
            "spec": spec,
        })
    }

    #[test]
    fn document_header_rules() {
        let good = document(json!({"provider": "aws", "objectStorage": {"bucket": "b"}}));
        assert_eq!(validate_document(&good), Report::default());

        let r =
            validate_document(&json!({"apiVersion": "velero.io/v2", "kind": 5, "metadata": {}}));
        assert_eq!(
            messages(&r),
            [
                r#"apiVersion: Unsupported value: "velero.io/v2": supported values: "velero.io/v1""#,
                r#"kind: Unsupported value: "5": supported values: "BackupStorageLocation""#,
                "metadata.name: Required value: name the BackupStorageLocation",
                "spec: Required value: set spec with at least provider and objectStorage.bucket",
            ]
        );
        let r = validate_document(&json!([]));
        assert_eq!(paths(&r), ["apiVersion", "kind", "metadata.name", "spec"]);

        let mut bad_name = good.clone();
        bad_name["metadata"]["name"] = json!("Default");
        assert_eq!(paths(&validate_document(&bad_name)), ["metadata.name"]);
    }

    #[test]
    fn document_decode_errors_name_the_field() {
        let r = validate_document(&document(json!({
            "provider": 5,
            "default": "yes",
            "config": {"region": 1, "ok": "x"},
            "credential": {"name": "c"},
            "objectStorage": {"caCert": "***", "caCertRef": "ca"},
            "backupSyncPeriod": null,
        })));
        assert_eq!(
            messages(&r),
            [
                r#"spec.provider: Invalid value: "5": invalid type: integer `5`, expected a string"#,
                r#"spec.config.region: Invalid value: "1": invalid type: integer `1`, expected a string"#,
                "spec.credential.key: Required value: set the key, within the Secret, that holds the file",
                "spec.objectStorage.bucket: Required value: set the bucket that holds the backups",
                r#"spec.objectStorage.caCert: Invalid value: "***": Invalid symbol 42, offset 0."#,
                r#"spec.objectStorage.caCertRef: Invalid value: "ca": must be an object"#,
                r#"spec.default: Invalid value: "yes": invalid type: string "yes", expected a boolean"#,
            ]
        );
        let r = validate_document(&document(json!({"provider": "aws"})));
        assert_eq!(
            messages(&r),
            ["spec.objectStorage: Required value: set objectStorage with at least a bucket"]
        );
    }

    #[test]
    fn document_runs_the_rules_and_flags_unknown_fields() {
        let r = validate_document(&document(json!({
            "provider": "aws",
            "objectStorage": {"bucket": "a/b", "prefixx": "p"},
            "validationFrequncy": "1m",
        })));
        assert_eq!(paths(&r), ["spec.objectStorage.bucket"]);
        assert_eq!(
            r.warnings,
            [
                "spec.validationFrequncy: unknown field; the API server drops it",
                "spec.objectStorage.prefixx: unknown field; the API server drops it",
            ]
        );
    }
}
