//! Velero's aws plugin (velero-plugin-for-aws), and the S3 services that stand in for AWS:
//! its config keys and checks, its endpoint (virtual-hosted or path style, as the AWS SDK
//! picks), its region rule, its shared credentials file, and the S3 store object_store builds.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::client::HttpConnector;
use object_store::{ObjectStore, RetryConfig};

use super::{
    Config, Refusal, Secret, StoreConfig, Target, parse_endpoint_url, parse_go_bool, value,
};
use crate::rules::config::{check_bool, check_url, config_path};
use crate::rules::report::{ErrorKind, Report};

pub(crate) const CONFIG_KEYS: [&str; 13] = [
    "region",
    "s3Url",
    "publicUrl",
    "kmsKeyId",
    "customerKeyEncryptionFile",
    "s3ForcePathStyle",
    "signatureVersion",
    "profile",
    "serverSideEncryption",
    "insecureSkipTLSVerify",
    "enableSharedConfig",
    "tagging",
    "checksumAlgorithm",
];

/// The region of an aws BSL that names none beside its s3Url, or whose bucket's region the
/// lookup does not tell, as in Velero's plugin.
pub const DEFAULT_REGION: &str = "us-east-1";

/// AWS's global S3 endpoint, where a bucket's region is looked up.
pub const GLOBAL: &str = "https://s3.amazonaws.com";

pub(crate) fn check_config(config: &Config, r: &mut Report) {
    for key in [
        "s3ForcePathStyle",
        "insecureSkipTLSVerify",
        "enableSharedConfig",
    ] {
        if check_bool(config, key, r) == Some(true) && key == "insecureSkipTLSVerify" {
            r.warn(
                &config_path(key),
                "TLS certificate verification is disabled",
            );
        }
    }
    check_url(config, "s3Url", r);
    check_url(config, "publicUrl", r);
    if let Some(v) = value(config, "signatureVersion")
        && !matches!(v, "1" | "4")
    {
        r.not_supported(config_path("signatureVersion"), v, &["1", "4"], "");
    }
    if value(config, "kmsKeyId").is_some() && value(config, "customerKeyEncryptionFile").is_some() {
        r.error(
            config_path("customerKeyEncryptionFile"),
            ErrorKind::Forbidden,
            "cannot be combined with kmsKeyId; use either SSE-KMS (kmsKeyId) or SSE-C (customerKeyEncryptionFile)",
        );
    }
    const CHECKSUMS: [&str; 5] = ["", "CRC32", "CRC32C", "SHA1", "SHA256"];
    if let Some(v) = value(config, "checksumAlgorithm")
        && !CHECKSUMS.contains(&v)
    {
        r.not_supported(config_path("checksumAlgorithm"), v, &CHECKSUMS, "");
    }
}

/// An S3 multi-region access point: `arn:aws:s3::<12-digit account>:accesspoint/<alias>`.
pub fn is_mrap_arn(bucket: &str) -> bool {
    bucket
        .strip_prefix("arn:aws:s3::")
        .and_then(|rest| rest.split_once(":accesspoint/"))
        .is_some_and(|(account, alias)| {
            account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && !alias.is_empty()
                && !alias.contains('/')
        })
}

/// A boolean config key; unset is false.
pub(crate) fn config_bool(config: &Config, key: &str) -> Result<bool, Refusal> {
    match value(config, key) {
        None => Ok(false),
        Some(v) => parse_go_bool(v)
            .ok_or_else(|| Refusal::Invalid(format!("config.{key} is not a boolean: {v:?}"))),
    }
}

/// Whether the bucket's region is to be looked up: Velero's plugin does so when the config
/// names neither region nor s3Url.
pub(crate) fn region_unknown(config: Option<&Config>) -> bool {
    config.is_none_or(|c| value(c, "region").is_none() && value(c, "s3Url").is_none())
}

/// The config of a BSL whose region was looked up: that region, and where another S3 service
/// stands in for AWS, that service, path style.
pub(crate) fn set_region(config: &mut Config, region: String, service: Option<&str>) {
    config.insert("region".into(), region);
    if let Some(url) = service {
        config.insert("s3Url".into(), url.to_string());
        config.insert("s3ForcePathStyle".into(), "true".into());
    }
}

/// The URL of the unsigned HEAD that finds a bucket's region: at `service` (path style) when
/// another S3 service stands in for AWS, else at AWS's global endpoint.
pub(crate) fn region_lookup_url(service: Option<&str>, bucket: &str) -> String {
    match service {
        Some(service) => format!("{service}/{bucket}"),
        None if virtual_hostable(bucket, "https") => format!("https://{bucket}.s3.amazonaws.com"),
        None => format!("{GLOBAL}/{bucket}"),
    }
}

/// Whether a bucket can be a DNS label in a virtual-hosted URL, as the AWS SDK decides.
fn virtual_hostable(bucket: &str, scheme: &str) -> bool {
    (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !bucket.starts_with(['-', '.'])
        && !bucket.ends_with(['-', '.'])
        // A dotted bucket breaks the wildcard certificate of an https host.
        && !(scheme == "https" && bucket.contains('.'))
}

fn region(config: &Config) -> &str {
    value(config, "region").unwrap_or(DEFAULT_REGION)
}

pub(crate) fn endpoint(config: &Config, bucket: &str) -> Target {
    let path_style = value(config, "s3ForcePathStyle").and_then(parse_go_bool) == Some(true);
    let region = region(config);
    let Some(s3_url) = value(config, "s3Url") else {
        let virtual_hosted = !path_style && virtual_hostable(bucket, "https");
        let url = if virtual_hosted {
            format!("https://{bucket}.s3.{region}.amazonaws.com")
        } else {
            format!("https://s3.{region}.amazonaws.com")
        };
        return Target {
            key: format!("https://s3.{region}.amazonaws.com"),
            url: Ok(url),
            virtual_hosted,
        };
    };
    let (key, parsed) = parse_endpoint_url("s3Url", s3_url);
    let mut url = match parsed {
        Ok(url) => url,
        Err(e) => {
            return Target {
                key,
                url: Err(e),
                virtual_hosted: false,
            };
        }
    };
    // The SDK's rules: an IP address or a bucket that is no DNS label means path style.
    let domain = url.domain().map(str::to_string);
    let virtual_hosted = !path_style && domain.is_some() && virtual_hostable(bucket, url.scheme());
    if let (true, Some(domain)) = (virtual_hosted, domain) {
        let host = format!("{bucket}.{domain}");
        if url.set_host(Some(&host)).is_err() {
            return Target {
                key,
                url: Err(format!(
                    "config.s3Url: cannot put bucket {bucket:?} in the host"
                )),
                virtual_hosted,
            };
        }
    }
    Target {
        key,
        url: Ok(url.as_str().trim_end_matches('/').to_string()),
        virtual_hosted,
    }
}

pub(crate) fn store(
    config: &Config,
    bucket: &str,
    credential: Option<&str>,
) -> Result<(String, StoreConfig), Refusal> {
    config_bool(config, "s3ForcePathStyle")?;
    let endpoint = endpoint(config, bucket);
    let url = endpoint.url.map_err(Refusal::Invalid)?;
    let keys = match credential {
        Some(file) => {
            let profile = value(config, "profile").unwrap_or("default");
            Some(profile_keys(file, profile)?)
        }
        None => None,
    };
    Ok((
        endpoint.key,
        StoreConfig::Aws(Store {
            region: region(config).to_string(),
            url,
            virtual_hosted: endpoint.virtual_hosted,
            keys,
        }),
    ))
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Store {
    pub region: String,
    /// The URL object_store sends requests to (with the bucket in the host if
    /// `virtual_hosted`).
    pub url: String,
    pub virtual_hosted: bool,
    /// None: object_store's default credential chain.
    pub keys: Option<Keys>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Keys {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

impl Store {
    pub fn secrets(&self) -> Vec<String> {
        let Some(k) = &self.keys else {
            return Vec::new();
        };
        let mut out = vec![k.secret_access_key.0.clone()];
        out.extend(k.session_token.iter().map(|t| t.0.clone()));
        out
    }

    pub fn build(
        &self,
        bucket: &str,
        retry: RetryConfig,
        connector: impl HttpConnector,
    ) -> object_store::Result<Arc<dyn ObjectStore>> {
        let builder = match &self.keys {
            Some(keys) => {
                let b = AmazonS3Builder::new()
                    .with_access_key_id(&keys.access_key_id)
                    .with_secret_access_key(&keys.secret_access_key.0);
                match &keys.session_token {
                    Some(token) => b.with_token(&token.0),
                    None => b,
                }
            }
            // object_store's default chain: web identity, container and instance credentials.
            None => AmazonS3Builder::from_env(),
        };
        Ok(Arc::new(
            builder
                .with_bucket_name(bucket)
                .with_region(&self.region)
                .with_endpoint(&self.url)
                .with_virtual_hosted_style_request(self.virtual_hosted)
                .with_allow_http(true)
                .with_retry(retry)
                .with_http_connector(connector)
                .build()?,
        ))
    }
}

/// Profile settings under which the AWS SDK gets credentials without static keys.
const INDIRECT: [&str; 7] = [
    "role_arn",
    "source_profile",
    "credential_source",
    "credential_process",
    "web_identity_token_file",
    "sso_session",
    "sso_start_url",
];

/// The static keys of one profile of an AWS shared credentials file (INI). Sections are
/// `[name]`, or `[profile name]` as in the config file.
pub(crate) fn profile_keys(file: &str, profile: &str) -> Result<Keys, Refusal> {
    let mut section: Option<String> = None;
    let mut found = false;
    let mut values: HashMap<String, String> = HashMap::new();
    for line in file.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim();
            let name = name.strip_prefix("profile ").unwrap_or(name).trim();
            section = Some(name.to_string());
            found |= name == profile;
            continue;
        }
        if section.as_deref() != Some(profile) {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            values.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    if !found {
        return Err(Refusal::Invalid(format!(
            "the credentials file has no profile {profile:?} (config.profile picks the profile, \
             default \"default\")"
        )));
    }
    let get = |key: &str| values.get(key).filter(|v| !v.is_empty()).cloned();
    match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(access_key_id), Some(secret)) => Ok(Keys {
            access_key_id,
            secret_access_key: Secret(secret),
            session_token: get("aws_session_token").map(Secret),
        }),
        (id, _) => {
            if let Some(setting) = INDIRECT.iter().find(|k| values.contains_key(**k)) {
                return Err(Refusal::Unsupported(format!(
                    "bsl-sentinel cannot use profile {profile:?} of the credentials file \
                     ({setting}); the phase is left to Velero"
                )));
            }
            let missing = if id.is_none() {
                "aws_access_key_id"
            } else {
                "aws_secret_access_key"
            };
            Err(Refusal::Invalid(format!(
                "profile {profile:?} of the credentials file has no {missing}"
            )))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rules::testing::*;
    use crate::rules::{Report, validate};

    pub(crate) const AWS_FILE: &str = "[default]\naws_access_key_id = AKID\naws_secret_access_key = s3cr3t-value\n\
        \n# other\n[profile backup]\naws_access_key_id=AKID2\naws_secret_access_key=other-secret\n\
        aws_session_token=tok-en-value\n[assume]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = default\n";

    #[test]
    fn aws_config_rules() {
        let aws = |kv: &[(&str, &str)]| validate(&with_config(spec("aws", "b"), kv));
        for v in [
            "1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False", "",
        ] {
            let r = aws(&[("s3ForcePathStyle", v), ("enableSharedConfig", v)]);
            assert!(r.errors.is_empty(), "{v}: {r:?}");
        }
        assert_eq!(
            messages(&aws(&[("s3ForcePathStyle", "yes")])),
            [
                r#"spec.config.s3ForcePathStyle: Invalid value: "yes": must be a boolean: true, false, 1, 0, t, f, T, F, TRUE, FALSE, True or False"#
            ]
        );
        let r = aws(&[("insecureSkipTLSVerify", "true")]);
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings,
            ["spec.config.insecureSkipTLSVerify: TLS certificate verification is disabled"]
        );
        assert_eq!(
            aws(&[("insecureSkipTLSVerify", "false")]),
            Report::default()
        );

        for ok in [
            "https://s3.example.com",
            "http://minio:9000/",
            "HTTPS://u:p@[::1]:9000/x?y",
        ] {
            assert_eq!(
                aws(&[("s3Url", ok), ("publicUrl", ok)]),
                Report::default(),
                "{ok}"
            );
        }
        for bad in [
            "minio:9000",
            "s3://b",
            "https://",
            "https://:9000",
            "http://h:x",
            "http://h\n",
        ] {
            assert_eq!(
                paths(&aws(&[("s3Url", bad)])),
                ["spec.config.s3Url"],
                "{bad}"
            );
        }
        assert_eq!(
            messages(&aws(&[("publicUrl", "minio:9000")])),
            [
                r#"spec.config.publicUrl: Invalid value: "minio:9000": must be a URL starting with http:// or https://, e.g. https://storage.example.com"#
            ]
        );

        assert_eq!(aws(&[("signatureVersion", "4")]), Report::default());
        assert_eq!(
            messages(&aws(&[("signatureVersion", "2")])),
            [r#"spec.config.signatureVersion: Unsupported value: "2": supported values: "1", "4""#]
        );

        assert_eq!(aws(&[("kmsKeyId", "k")]), Report::default());
        let r = aws(&[("kmsKeyId", "k"), ("customerKeyEncryptionFile", "/f")]);
        assert_eq!(
            messages(&r),
            [
                "spec.config.customerKeyEncryptionFile: Forbidden: cannot be combined with kmsKeyId; use either SSE-KMS (kmsKeyId) or SSE-C (customerKeyEncryptionFile)"
            ]
        );

        for ok in ["", "CRC32", "CRC32C", "SHA1", "SHA256"] {
            assert_eq!(aws(&[("checksumAlgorithm", ok)]), Report::default());
        }
        assert_eq!(
            paths(&aws(&[("checksumAlgorithm", "crc32")])),
            ["spec.config.checksumAlgorithm"]
        );
    }

    #[test]
    fn aws_profiles() {
        let keys = profile_keys(AWS_FILE, "backup").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(keys.access_key_id, "AKID2");
        assert_eq!(keys.session_token, Some(Secret("tok-en-value".into())));
        assert_eq!(
            profile_keys(AWS_FILE, "nope"),
            Err(Refusal::Invalid(
                "the credentials file has no profile \"nope\" (config.profile picks the profile, \
                 default \"default\")"
                    .into()
            ))
        );
        assert!(matches!(
            profile_keys(AWS_FILE, "assume"),
            Err(Refusal::Unsupported(m)) if m.contains("role_arn")
        ));
        assert_eq!(
            profile_keys("[default]\naws_access_key_id=A\n", "default"),
            Err(Refusal::Invalid(
                "profile \"default\" of the credentials file has no aws_secret_access_key".into()
            ))
        );
    }
}
