//! The plan of a check, derived from the spec and the Secrets' bytes without I/O: which
//! provider, endpoint, TLS settings, bucket, prefix and store; and Velero's judgement of the
//! listing it makes.

use crate::bsl::BackupStorageLocationSpec;
use crate::provider::{Provider, Refusal, StoreConfig, aws, known_provider};

/// What one check does, derived from the spec and the Secrets without I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    pub provider: Provider,
    /// The endpoint key; see [`super::Probe::endpoint_key`].
    pub endpoint: String,
    pub tls: Tls,
    pub bucket: String,
    /// Without slashes at the ends; None for the bucket's root.
    pub prefix: Option<String>,
    pub store: StoreConfig,
}

impl Plan {
    /// `s3://bucket/prefix/`, as users know the location.
    pub fn location(&self) -> String {
        location(Some(self.provider), &self.bucket, self.prefix.as_deref())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Tls {
    /// aws insecureSkipTLSVerify.
    pub insecure: bool,
    /// caCertRef's bytes, else caCert's: added to the trusted roots.
    pub ca: Option<Vec<u8>>,
}

pub(super) fn plan(
    spec: &BackupStorageLocationSpec,
    credential: Option<&[u8]>,
    ca_from_ref: Option<&[u8]>,
) -> Result<Plan, Refusal> {
    let Some(provider) = known_provider(&spec.provider) else {
        return Err(Refusal::Unsupported(format!(
            "bsl-sentinel cannot check provider {:?}; the phase is left to Velero",
            spec.provider
        )));
    };
    let config = spec.config.clone().unwrap_or_default();
    let bucket = spec.object_storage.bucket.trim_matches('/').to_string();
    if bucket.is_empty() {
        return Err(Refusal::Invalid("the bucket name is empty".into()));
    }
    if provider == Provider::Aws && aws::is_mrap_arn(&bucket) {
        return Err(Refusal::Unsupported(
            "bsl-sentinel cannot check an S3 multi-region access point (it needs SigV4A \
             signing); the phase is left to Velero"
                .into(),
        ));
    }
    if bucket.contains('/') {
        // Velero's wording (IsValid).
        return Err(Refusal::Invalid(format!(
            "backup storage location's bucket name {bucket:?} must not contain a '/' \
             (if using a prefix, put it in the 'Prefix' field instead)"
        )));
    }
    let prefix = spec
        .object_storage
        .prefix
        .as_deref()
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    let credential = credential
        .map(|bytes| {
            std::str::from_utf8(bytes)
                .map_err(|_| Refusal::Invalid("the credentials file is not UTF-8 text".into()))
        })
        .transpose()?;
    let tls = Tls {
        // Only the aws plugin has the setting.
        insecure: provider == Provider::Aws && aws::config_bool(&config, "insecureSkipTLSVerify")?,
        ca: ca_from_ref
            .map(<[u8]>::to_vec)
            .or_else(|| spec.object_storage.ca_cert.as_ref().map(|c| c.0.clone())),
    };
    let (endpoint, store) = provider.store(&config, &bucket, credential)?;
    Ok(Plan {
        provider,
        endpoint,
        tls,
        bucket,
        prefix,
        store,
    })
}

/// The bucket of an aws BSL that names neither config.region nor config.s3Url, whose region
/// is then the bucket's own (Velero's rule); None for every other BSL.
pub(super) fn region_unknown(spec: &BackupStorageLocationSpec) -> Option<&str> {
    if known_provider(&spec.provider) != Some(Provider::Aws)
        || !aws::region_unknown(spec.config.as_ref())
    {
        return None;
    }
    let bucket = spec.object_storage.bucket.trim_matches('/');
    // The plan reports an empty bucket, one with a slash, or an access point.
    (!bucket.is_empty() && !bucket.contains('/')).then_some(bucket)
}

/// `s3://bucket/prefix/`, as users know a location.
pub(super) fn location(provider: Option<Provider>, bucket: &str, prefix: Option<&str>) -> String {
    // A plugin provider is most often another S3 service.
    let scheme = provider.map_or("s3", Provider::scheme);
    match prefix
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty())
    {
        Some(prefix) => format!("{scheme}://{bucket}/{prefix}/"),
        None => format!("{scheme}://{bucket}/"),
    }
}

/// The top-level directories Velero writes (pkg/persistence/object_store.go).
const VALID_DIRS: [&str; 6] = [
    "backups", "restores", "restic", "metadata", "plugins", "kopia",
];

/// Velero's layout rule: every top-level directory is one Velero writes. The error is Velero's
/// own message, word for word.
pub(super) fn check_layout<S: AsRef<str>>(dirs: &[S]) -> Result<(), String> {
    let invalid: Vec<&str> = dirs
        .iter()
        .map(AsRef::as_ref)
        .filter(|d| !VALID_DIRS.contains(d))
        .collect();
    match invalid.len() {
        0 => Ok(()),
        1..=3 => Err(format!(
            "Backup store contains invalid top-level directories: [{}]",
            invalid.join(" ")
        )),
        n => Err(format!(
            "Backup store contains {n} invalid top-level directories: [{} ...]",
            invalid[..3].join(" ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bsl::ObjectStorageLocation;
    use crate::provider::aws::tests::AWS_FILE;
    use crate::provider::azure::Auth;
    use crate::provider::{Secret, azure, gcp};
    use crate::storage::Probe;

    fn spec(provider: &str, bucket: &str, config: &[(&str, &str)]) -> BackupStorageLocationSpec {
        BackupStorageLocationSpec {
            provider: provider.into(),
            config: Some(
                config
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            object_storage: ObjectStorageLocation {
                bucket: bucket.into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn layout_accepts_velero_dirs_and_empty() {
        assert_eq!(check_layout::<&str>(&[]), Ok(()));
        assert_eq!(check_layout(&VALID_DIRS), Ok(()));
    }

    #[test]
    fn layout_names_foreign_dirs_as_velero_does() {
        assert_eq!(
            check_layout(&["backups", "a", "b"]),
            Err("Backup store contains invalid top-level directories: [a b]".into())
        );
        assert_eq!(
            check_layout(&["a", "b", "c"]),
            Err("Backup store contains invalid top-level directories: [a b c]".into())
        );
        assert_eq!(
            check_layout(&["a", "b", "backups", "c", "d", "e"]),
            Err("Backup store contains 5 invalid top-level directories: [a b c ...]".into())
        );
    }

    #[test]
    fn unknown_provider_is_unsupported() {
        let refusal = plan(&spec("example.com/plugin", "b", &[]), None, None);
        assert_eq!(
            refusal,
            Err(Refusal::Unsupported(
                "bsl-sentinel cannot check provider \"example.com/plugin\"; the phase is left to Velero"
                    .into()
            ))
        );
    }

    #[test]
    fn multi_region_access_point_is_unsupported() {
        let mrap = "arn:aws:s3::123456789012:accesspoint/mfzwi23gnjvgw.mrap";
        assert!(matches!(
            plan(&spec("aws", mrap, &[("region", "us-east-1")]), None, None),
            Err(Refusal::Unsupported(m)) if m.contains("multi-region access point")
        ));
        assert_eq!(region_unknown(&spec("aws", mrap, &[])), None);
    }

    #[test]
    fn region_is_the_buckets_only_without_region_and_s3_url() {
        assert_eq!(region_unknown(&spec("aws", "/b1/", &[])), Some("b1"));
        assert_eq!(
            region_unknown(&spec("velero.io/aws", "b1", &[("region", " ")])),
            None,
            "a blank region is one: the plugin reads it as written, as the rules do"
        );
        assert_eq!(
            region_unknown(&spec("aws", "b1", &[("region", "eu-west-1")])),
            None
        );
        assert_eq!(
            region_unknown(&spec("aws", "b1", &[("s3Url", "http://minio:9000")])),
            None
        );
        assert_eq!(region_unknown(&spec("gcp", "b1", &[])), None);
        assert_eq!(region_unknown(&spec("aws", "a/b", &[])), None);
    }

    #[test]
    fn bucket_with_slash_is_invalid() {
        let Err(Refusal::Invalid(m)) = plan(&spec("aws", "/a/b/", &[]), None, None) else {
            panic!("expected invalid");
        };
        assert!(m.contains("must not contain a '/'"), "{m}");
    }

    #[test]
    fn aws_path_style_with_s3_url() {
        let s = spec(
            "velero.io/aws",
            "b",
            &[
                ("s3Url", "http://127.0.0.1:8333/"),
                ("s3ForcePathStyle", "true"),
            ],
        );
        let p = plan(&s, Some(AWS_FILE.as_bytes()), None).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(p.endpoint, "http://127.0.0.1:8333");
        assert_eq!(
            Probe::new(1, Duration::from_secs(1))
                .endpoint_key(&s)
                .as_deref(),
            Some("http://127.0.0.1:8333")
        );
        let StoreConfig::Aws(aws::Store {
            region,
            url,
            virtual_hosted,
            keys,
        }) = p.store
        else {
            panic!("not aws");
        };
        assert_eq!(region, "us-east-1");
        assert_eq!(url, "http://127.0.0.1:8333");
        assert!(!virtual_hosted);
        let keys = keys.unwrap_or_else(|| panic!("no keys"));
        assert_eq!(keys.access_key_id, "AKID");
        assert_eq!(keys.secret_access_key, Secret("s3cr3t-value".into()));
        assert_eq!(keys.session_token, None);
    }

    #[test]
    fn aws_virtual_hosted_puts_bucket_in_host() {
        let s = spec(
            "aws",
            "my-bucket",
            &[
                ("s3Url", "https://minio.example.com:9000"),
                ("region", "eu-west-1"),
            ],
        );
        let p = plan(&s, None, None).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(p.endpoint, "https://minio.example.com:9000");
        let StoreConfig::Aws(aws::Store {
            url,
            virtual_hosted,
            ..
        }) = p.store
        else {
            panic!("not aws");
        };
        assert_eq!(url, "https://my-bucket.minio.example.com:9000");
        assert!(virtual_hosted);
        // An IP address cannot take the bucket: path style, as the SDK does.
        let s = spec("aws", "my-bucket", &[("s3Url", "http://10.0.0.1:9000")]);
        let p = plan(&s, None, None).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(matches!(
            p.store,
            StoreConfig::Aws(aws::Store {
                virtual_hosted: false,
                ..
            })
        ));
    }

    #[test]
    fn aws_default_endpoint_uses_region() {
        let s = spec("aws", "my-bucket", &[("region", "eu-west-1")]);
        assert_eq!(
            Probe::new(1, Duration::from_secs(1))
                .endpoint_key(&s)
                .as_deref(),
            Some("https://s3.eu-west-1.amazonaws.com")
        );
        let p = plan(&s, None, None).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(matches!(
            p.store,
            StoreConfig::Aws(aws::Store { ref url, virtual_hosted: true, .. })
                if url == "https://my-bucket.s3.eu-west-1.amazonaws.com"
        ));
    }

    #[test]
    fn aws_bad_config_is_invalid() {
        for config in [
            [("s3Url", "minio:9000"), ("s3ForcePathStyle", "true")],
            [("s3Url", "http://minio:9000"), ("s3ForcePathStyle", "yes")],
        ] {
            let result = plan(&spec("aws", "b", &config), None, None);
            assert!(
                matches!(result, Err(Refusal::Invalid(_))),
                "{config:?}: {result:?}"
            );
        }
    }

    #[test]
    fn unknown_profile_is_invalid() {
        let s = spec("aws", "b", &[("profile", "nope")]);
        assert!(matches!(
            plan(&s, Some(AWS_FILE.as_bytes()), None),
            Err(Refusal::Invalid(_))
        ));
    }

    #[test]
    fn tls_settings() {
        let mut s = spec("aws", "b", &[("insecureSkipTLSVerify", "True")]);
        s.object_storage.ca_cert = Some(k8s_openapi::ByteString(b"inline".to_vec()));
        let p = plan(&s, None, None).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            p.tls,
            Tls {
                insecure: true,
                ca: Some(b"inline".to_vec())
            }
        );
        let p = plan(&s, None, Some(b"from-ref")).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(p.tls.ca, Some(b"from-ref".to_vec()));
    }

    #[test]
    fn gcp_plan() {
        let s = spec(
            "gcp",
            "b",
            &[("storeEndpoint", "http://127.0.0.1:4443/storage/v1/")],
        );
        let json = br#"{"type":"service_account","disable_oauth":true}"#;
        let p = plan(&s, Some(json), None).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(p.endpoint, "http://127.0.0.1:4443");
        assert!(matches!(
            p.store,
            StoreConfig::Gcp(gcp::Store { ref base_url, service_account: Some(_) }) if base_url == "http://127.0.0.1:4443"
        ));
        assert_eq!(
            Probe::new(1, Duration::from_secs(1)).endpoint_key(&spec("gcp", "b", &[])),
            Some("https://storage.googleapis.com".to_string())
        );
        assert!(matches!(
            plan(&s, Some(b"{not json"), None),
            Err(Refusal::Invalid(_))
        ));
        assert!(matches!(
            plan(&s, Some(br#"{"type":"external_account"}"#), None),
            Err(Refusal::Unsupported(_))
        ));
    }

    #[test]
    fn azure_plan() {
        let s = spec(
            "azure",
            "c",
            &[(
                "storageAccountURI",
                "http://127.0.0.1:10000/devstoreaccount1/",
            )],
        );
        let file = b"# key\nexport AZURE_STORAGE_ACCOUNT_ACCESS_KEY=\"a2V5\"\nAZURE_CLOUD_NAME=AzurePublicCloud\n";
        let p = plan(&s, Some(file), None).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(p.endpoint, "http://127.0.0.1:10000");
        assert_eq!(
            p.store,
            StoreConfig::Azure(azure::Store {
                account: "devstoreaccount1".into(),
                url: "http://127.0.0.1:10000/devstoreaccount1".into(),
                auth: Some(Auth::Key(Secret("a2V5".into()))),
            })
        );
        let s = spec(
            "azure",
            "c",
            &[
                ("storageAccount", "acct"),
                ("storageAccountSASTokenEnvVar", "SAS"),
            ],
        );
        assert_eq!(
            Probe::new(1, Duration::from_secs(1))
                .endpoint_key(&s)
                .as_deref(),
            Some("https://acct.blob.core.windows.net")
        );
        let p = plan(&s, Some(b"SAS=?sv=1&sig=abc\n"), None).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(matches!(
            p.store,
            StoreConfig::Azure(azure::Store { auth: Some(Auth::Sas(Secret(ref t))), .. }) if t == "sv=1&sig=abc"
        ));
        let s = spec(
            "azure",
            "c",
            &[
                ("storageAccount", "acct"),
                ("storageAccountKeyEnvVar", "MY_KEY"),
            ],
        );
        assert!(matches!(
            plan(&s, Some(b"OTHER=1\n"), None),
            Err(Refusal::Invalid(m)) if m.contains("MY_KEY")
        ));
        assert!(matches!(
            plan(&spec("azure", "c", &[]), None, None),
            Err(Refusal::Invalid(m)) if m.contains("storageAccount")
        ));
    }
}
