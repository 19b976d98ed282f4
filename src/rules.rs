//! The rule engine: pure checks of a BackupStorageLocation against what Velero and its aws, gcp
//! and azure plugins accept, reporting every problem at once in Kubernetes' field.Error style.
//! Shared by the admission webhook, the reconciler and the offline CLI.
//!
//! Principle: reject only what cannot work once Velero picks it up; when unsure, warn.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use serde::Deserialize;
use serde_json::Value;

use crate::bsl::{BackupStorageLocationSpec, ObjectStorageLocation, SecretKeySelector};
use crate::duration::GoDuration;

/// Everything wrong with one BSL: errors reject it, warnings are shown to the user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub errors: Vec<FieldError>,
    /// One line each, under about 120 characters, prefixed with the field path.
    pub warnings: Vec<String>,
}

/// One bad field, rendered like Kubernetes' `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The JSON path, e.g. `spec.objectStorage.bucket`.
    pub path: String,
    pub kind: ErrorKind,
    /// What is wrong and how to fix it. For NotSupported it starts with the supported values,
    /// as Kubernetes words it.
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Required,
    Invalid { value: String },
    NotSupported { value: String, allowed: Vec<String> },
    Forbidden,
}

impl FieldError {
    /// The StatusCause reason Kubernetes gives this kind of error.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Invalid { .. } => "FieldValueInvalid",
            ErrorKind::NotSupported { .. } => "FieldValueNotSupported",
            ErrorKind::Forbidden => "FieldValueForbidden",
        }
    }

    /// The error without its path, as a StatusCause message (Kubernetes' ErrorBody).
    pub fn message(&self) -> String {
        let detail = &self.detail;
        match &self.kind {
            ErrorKind::Required => format!("Required value: {detail}"),
            ErrorKind::Invalid { value } => format!("Invalid value: {value:?}: {detail}"),
            ErrorKind::NotSupported { value, .. } => {
                format!("Unsupported value: {value:?}: {detail}")
            }
            ErrorKind::Forbidden => format!("Forbidden: {detail}"),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message())
    }
}

impl std::error::Error for FieldError {}

impl Report {
    fn error(&mut self, path: impl Into<String>, kind: ErrorKind, detail: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.into(),
            kind,
            detail: detail.into(),
        });
    }

    fn invalid(&mut self, path: impl Into<String>, value: &str, detail: impl Into<String>) {
        let value = short(value);
        self.error(path, ErrorKind::Invalid { value }, detail);
    }

    fn not_supported(
        &mut self,
        path: impl Into<String>,
        value: &str,
        allowed: &[&str],
        hint: &str,
    ) {
        let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        let mut detail = format!("supported values: {}", list.join(", "));
        if !hint.is_empty() {
            detail = format!("{detail}; {hint}");
        }
        let kind = ErrorKind::NotSupported {
            value: short(value),
            allowed: allowed.iter().map(|a| a.to_string()).collect(),
        };
        self.error(path, kind, detail);
    }

    fn warn(&mut self, path: &str, message: impl fmt::Display) {
        self.warnings.push(format!("{path}: {message}"));
    }
}

/// The object store plugins whose config bsl-sentinel knows; others pass unchecked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    Aws,
    Gcp,
    Azure,
}

/// Keys Velero itself puts into every plugin's config.
const VELERO_KEYS: [&str; 4] = ["bucket", "prefix", "caCert", "credentialsFile"];

impl Provider {
    /// The name the plugin registers, which Velero looks the provider up by.
    pub fn plugin_name(self) -> &'static str {
        match self {
            Provider::Aws => "velero.io/aws",
            Provider::Gcp => "velero.io/gcp",
            Provider::Azure => "velero.io/azure",
        }
    }

    fn config_keys(self) -> &'static [&'static str] {
        match self {
            Provider::Aws => &[
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
            ],
            Provider::Gcp => &["kmsKeyName", "serviceAccount", "storeEndpoint"],
            Provider::Azure => &[
                "resourceGroup",
                "storageAccount",
                "storageAccountKeyEnvVar",
                "subscriptionId",
                "storageAccountURI",
                "useAAD",
                "activeDirectoryAuthorityURI",
                "blockSizeInBytes",
                "storageAccountSASTokenEnvVar",
                "storageAccountBlobEndpoint",
            ],
        }
    }
}

/// `aws`, `gcp`, `azure`, bare or `velero.io/`-prefixed (Velero prefixes bare names itself).
pub fn known_provider(provider: &str) -> Option<Provider> {
    match provider.strip_prefix("velero.io/").unwrap_or(provider) {
        "aws" => Some(Provider::Aws),
        "gcp" => Some(Provider::Gcp),
        "azure" => Some(Provider::Azure),
        _ => None,
    }
}

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
    check_config(
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
        check_ca_cert(pem, r);
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
    let arn_ok = is_mrap_arn(trimmed) && !matches!(provider, Some(Provider::Gcp | Provider::Azure));
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

const PEM_BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const PEM_END: &str = "-----END CERTIFICATE-----";

fn check_ca_cert(pem: &[u8], r: &mut Report) {
    const PATH: &str = "spec.objectStorage.caCert";
    // Velero hands an empty caCert to the plugin, which ignores it.
    if pem.is_empty() {
        r.warn(PATH, "is empty and has no effect; remove it");
        return;
    }
    r.warn(
        PATH,
        "inline caCert is deprecated; prefer caCertRef to a Secret holding the CA bundle",
    );
    let text = String::from_utf8_lossy(pem);
    let (good, bad) = scan_pem(&text);
    if good == 0 {
        let twice = base64_decode(&text).is_some_and(|d| {
            d.windows(PEM_BEGIN.len())
                .any(|w| w == PEM_BEGIN.as_bytes())
        });
        let detail = if twice {
            "the PEM bundle is base64-encoded twice; encode it once"
        } else {
            "must be a PEM bundle with at least one valid -----BEGIN CERTIFICATE----- block"
        };
        r.invalid(PATH, &text, detail);
    } else if bad > 0 {
        // Go skips blocks it cannot parse, so the good certificates still work.
        r.warn(
            PATH,
            format_args!("{bad} malformed certificate block(s) will be ignored"),
        );
    }
}

/// Counts well-formed and malformed CERTIFICATE blocks. Structural only: base64 that decodes to
/// one complete DER SEQUENCE, which is what every X.509 certificate is.
fn scan_pem(text: &str) -> (usize, usize) {
    let (mut good, mut bad) = (0, 0);
    let mut rest = text;
    while let Some(start) = rest.find(PEM_BEGIN) {
        let body = &rest[start + PEM_BEGIN.len()..];
        let Some(end) = body.find(PEM_END) else {
            bad += 1;
            break;
        };
        if base64_decode(&body[..end]).is_some_and(|der| is_der_sequence(&der)) {
            good += 1;
        } else {
            bad += 1;
        }
        rest = &body[end + PEM_END.len()..];
    }
    (good, bad)
}

fn is_der_sequence(der: &[u8]) -> bool {
    let [0x30, first, rest @ ..] = der else {
        return false;
    };
    let (len, content) = if first & 0x80 == 0 {
        (usize::from(*first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return false;
        }
        let (len, content) = rest.split_at(n);
        let len = len.iter().fold(0usize, |acc, b| acc << 8 | usize::from(*b));
        (len, content)
    };
    len == content.len()
}

/// Standard base64 with padding, whitespace ignored, as in a PEM body.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let chars: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if chars.is_empty() || !chars.len().is_multiple_of(4) {
        return None;
    }
    let data = chars
        .strip_suffix(b"==")
        .or_else(|| chars.strip_suffix(b"="))
        .unwrap_or(&chars);
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in data {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6 | u32::from(v)) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

fn check_secret_ref(selector: &SecretKeySelector, path: &str, holds: &str, r: &mut Report) {
    match selector.name() {
        "" => r.error(
            format!("{path}.name"),
            ErrorKind::Required,
            format!("set the name of the Secret, in the BSL's namespace, that holds {holds}"),
        ),
        name => {
            if let Err(why) = dns_subdomain(name) {
                r.invalid(format!("{path}.name"), name, format!("a Secret name {why}"));
            }
        }
    }
    match selector.key.as_str() {
        "" => r.error(
            format!("{path}.key"),
            ErrorKind::Required,
            format!("set the key, within the Secret, that holds {holds}"),
        ),
        key => {
            if let Err(why) = secret_key(key) {
                r.invalid(format!("{path}.key"), key, format!("a Secret key {why}"));
            }
        }
    }
}

/// Kubernetes' IsDNS1123Subdomain, which Secret names and plugin domains must satisfy.
fn dns_subdomain(s: &str) -> Result<(), &'static str> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if s.len() > 253 {
        Err("must be no more than 253 characters")
    } else if !s.split('.').all(label_ok) {
        Err(
            "must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        )
    } else {
        Ok(())
    }
}

/// Kubernetes' IsConfigMapKey, which Secret keys must satisfy.
fn secret_key(s: &str) -> Result<(), &'static str> {
    if s.len() > 253 {
        Err("must be no more than 253 characters")
    } else if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        Err("must consist of alphanumeric characters, '-', '_' or '.'")
    } else if s == "." || s.starts_with("..") {
        Err("must not be '.' or '..', nor start with '..'")
    } else {
        Ok(())
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

type Config = BTreeMap<String, String>;

/// A config value; the plugins treat an empty one as unset.
fn value<'a>(config: &'a Config, key: &str) -> Option<&'a str> {
    config
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

fn config_path(key: &str) -> String {
    format!("spec.config.{key}")
}

fn check_config(
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
    let mut allowed: Vec<&str> = provider
        .config_keys()
        .iter()
        .chain(&VELERO_KEYS)
        .copied()
        .collect();
    allowed.sort_unstable();
    for key in config.keys().filter(|k| !allowed.contains(&k.as_str())) {
        let hint = format!(
            "the {} plugin fails on any other key (\"config has invalid keys\")",
            provider.plugin_name()
        );
        r.not_supported(config_path(key), key, &allowed, &hint);
    }
    match provider {
        Provider::Aws => check_aws(config, r),
        Provider::Gcp => check_url(config, "storeEndpoint", r),
        Provider::Azure => check_azure(config, r),
    }
}

const BOOL_HINT: &str =
    "must be a boolean: true, false, 1, 0, t, f, T, F, TRUE, FALSE, True or False";

/// Go's strconv.ParseBool, which the plugins use.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn check_aws(config: &Config, r: &mut Report) {
    for key in [
        "s3ForcePathStyle",
        "insecureSkipTLSVerify",
        "enableSharedConfig",
    ] {
        let Some(v) = value(config, key) else {
            continue;
        };
        match parse_go_bool(v) {
            None => r.invalid(config_path(key), v, BOOL_HINT),
            Some(true) if key == "insecureSkipTLSVerify" => {
                r.warn(
                    &config_path(key),
                    "TLS certificate verification is disabled",
                );
            }
            Some(_) => {}
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

fn check_azure(config: &Config, r: &mut Report) {
    // Both the plugin and Velero's Azure client fail without it, even with storageAccountURI.
    if value(config, "storageAccount").is_none() {
        r.error(
            config_path("storageAccount"),
            ErrorKind::Required,
            "set the storage account name; the azure plugin fails without it, even when storageAccountURI is set",
        );
    }
    if let Some(v) = value(config, "useAAD")
        && parse_go_bool(v).is_none()
    {
        r.invalid(config_path("useAAD"), v, BOOL_HINT);
    }
    for key in [
        "storageAccountURI",
        "storageAccountBlobEndpoint",
        "activeDirectoryAuthorityURI",
    ] {
        check_url(config, key, r);
    }
    // The plugin ignores a bad block size and uses its 100 MiB maximum, so this only warns.
    const MAX_BLOCK: i64 = 100 * 1024 * 1024;
    if let Some(v) = config.get("blockSizeInBytes")
        && !v.parse::<i64>().is_ok_and(|n| (1..=MAX_BLOCK).contains(&n))
    {
        r.warn(
            &config_path("blockSizeInBytes"),
            format_args!(
                "{:?} is not in 1..{MAX_BLOCK}; the plugin uses {MAX_BLOCK}",
                short_n(v, 20)
            ),
        );
    }
}

fn check_url(config: &Config, key: &str, r: &mut Report) {
    if let Some(v) = value(config, key)
        && let Err(why) = http_url(v)
    {
        r.invalid(config_path(key), v, why);
    }
}

/// What Go's url.Parse plus the plugins' scheme checks accept: http(s), a host, a numeric port.
fn http_url(s: &str) -> Result<(), &'static str> {
    let rest = s
        .split_once("://")
        .filter(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
        })
        .map(|(_, rest)| rest)
        .ok_or(
            "must be a URL starting with http:// or https://, e.g. https://storage.example.com",
        )?;
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port),
        _ => (host_port, ""),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        Err("must name a host after the scheme, e.g. https://storage.example.com")
    } else if !port.bytes().all(|b| b.is_ascii_digit()) {
        Err("has a port that is not a number")
    } else {
        Ok(())
    }
}

/// Echoed values are cut so that a message stays readable.
fn short(s: &str) -> String {
    short_n(s, 64)
}

fn short_n(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// The JSON shape of a spec, mirroring crate::bsl, so that a document which does not decode
/// still gets its errors at the right field (serde alone names no path).
#[derive(Clone, Copy)]
enum Shape {
    Str,
    Bool,
    Bytes,
    StrMap,
    Obj(&'static [Field]),
}

/// Name, shape, and for a required field the detail to show when it is missing.
type Field = (&'static str, Shape, Option<&'static str>);

const SELECTOR: &[Field] = &[
    (
        "key",
        Shape::Str,
        Some("set the key, within the Secret, that holds the file"),
    ),
    ("name", Shape::Str, None),
    ("optional", Shape::Bool, None),
];

const OBJECT_STORAGE: &[Field] = &[
    (
        "bucket",
        Shape::Str,
        Some("set the bucket that holds the backups"),
    ),
    ("prefix", Shape::Str, None),
    ("caCert", Shape::Bytes, None),
    ("caCertRef", Shape::Obj(SELECTOR), None),
];

const SPEC: &[Field] = &[
    (
        "provider",
        Shape::Str,
        Some("set the object store plugin, e.g. aws, gcp or azure"),
    ),
    ("config", Shape::StrMap, None),
    ("credential", Shape::Obj(SELECTOR), None),
    (
        "objectStorage",
        Shape::Obj(OBJECT_STORAGE),
        Some("set objectStorage with at least a bucket"),
    ),
    ("default", Shape::Bool, None),
    ("accessMode", Shape::Str, None),
    ("backupSyncPeriod", Shape::Str, None),
    ("validationFrequency", Shape::Str, None),
];

fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => short(s),
        v => short(&v.to_string()),
    }
}

fn check_shape(v: &Value, shape: Shape, path: &str, r: &mut Report) {
    let leaf = match shape {
        Shape::Str => String::deserialize(v).map(drop),
        Shape::Bool => bool::deserialize(v).map(drop),
        Shape::Bytes => ByteString::deserialize(v).map(drop),
        Shape::StrMap | Shape::Obj(_) => {
            let Some(object) = v.as_object() else {
                return r.invalid(path, &json_text(v), "must be an object");
            };
            return check_object(object, shape, path, r);
        }
    };
    if let Err(e) = leaf {
        r.invalid(path, &json_text(v), e.to_string());
    }
}

fn check_object(object: &serde_json::Map<String, Value>, shape: Shape, path: &str, r: &mut Report) {
    let Shape::Obj(fields) = shape else {
        for (key, v) in object {
            check_shape(v, Shape::Str, &format!("{path}.{key}"), r);
        }
        return;
    };
    for key in object
        .keys()
        .filter(|k| !fields.iter().any(|(name, ..)| name == k))
    {
        r.warn(
            &format!("{path}.{}", short_n(key, 32)),
            "unknown field; the API server drops it",
        );
    }
    for &(name, shape, required) in fields {
        let path = format!("{path}.{name}");
        // The API server drops nulls for these fields, so null reads as absent.
        match (object.get(name), required) {
            (None | Some(Value::Null), Some(detail)) => r.error(path, ErrorKind::Required, detail),
            (None | Some(Value::Null), None) => {}
            (Some(v), _) => check_shape(v, shape, &path, r),
        }
    }
}

fn check_const(doc: &Value, key: &str, want: &str, r: &mut Report) {
    match doc.get(key) {
        None | Some(Value::Null) => r.error(key, ErrorKind::Required, format!("set {key}: {want}")),
        Some(Value::String(s)) if s == want => {}
        Some(v) => r.not_supported(key, &json_text(v), &[want], ""),
    }
}

/// Checks a whole manifest as the offline CLI reads it: type, name, then the spec.
pub fn validate_document(doc: &Value) -> Report {
    let mut r = Report::default();
    check_const(doc, "apiVersion", "velero.io/v1", &mut r);
    check_const(doc, "kind", "BackupStorageLocation", &mut r);
    let name = doc.pointer("/metadata/name");
    match name.filter(|v| !v.is_null() && v.as_str() != Some("")) {
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
    let Some(spec) = doc.get("spec").filter(|s| !s.is_null()) else {
        r.error(
            "spec",
            ErrorKind::Required,
            "set spec with at least provider and objectStorage.bucket",
        );
        return r;
    };
    let before = r.errors.len();
    check_shape(spec, Shape::Obj(SPEC), "spec", &mut r);
    if r.errors.len() > before {
        return r;
    }
    match BackupStorageLocationSpec::deserialize(spec) {
        Ok(spec) => {
            let rules = validate(&spec);
            r.errors.extend(rules.errors);
            r.warnings.extend(rules.warnings);
        }
        // Only reachable if the shape tables drift from crate::bsl.
        Err(e) => r.invalid("spec", &json_text(spec), e.to_string()),
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(provider: &str, bucket: &str) -> BackupStorageLocationSpec {
        BackupStorageLocationSpec {
            provider: provider.into(),
            object_storage: ObjectStorageLocation {
                bucket: bucket.into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn with_config(
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

    fn azure(kv: &[(&str, &str)]) -> BackupStorageLocationSpec {
        let mut all = vec![("storageAccount", "sa")];
        all.extend_from_slice(kv);
        with_config(spec("azure", "c"), &all)
    }

    fn selector(name: Option<&str>, key: &str) -> SecretKeySelector {
        SecretKeySelector {
            key: key.into(),
            name: name.map(Into::into),
            optional: None,
        }
    }

    fn messages(r: &Report) -> Vec<String> {
        r.errors.iter().map(ToString::to_string).collect()
    }

    fn paths(r: &Report) -> Vec<&str> {
        r.errors.iter().map(|e| e.path.as_str()).collect()
    }

    fn assert_clean(s: &BackupStorageLocationSpec) {
        let r = validate(s);
        assert_eq!(r, Report::default(), "{s:?}");
    }

    fn cert_pem() -> String {
        match rcgen::generate_simple_self_signed(vec!["ca.example".to_string()]) {
            Ok(c) => c.cert.pem(),
            Err(e) => panic!("rcgen: {e}"),
        }
    }

    #[test]
    fn renders_like_kubernetes() {
        let e = |kind, detail: &str| FieldError {
            path: "spec.x".into(),
            kind,
            detail: detail.into(),
        };
        assert_eq!(
            e(ErrorKind::Required, "d").to_string(),
            "spec.x: Required value: d"
        );
        assert_eq!(
            e(
                ErrorKind::Invalid {
                    value: "a/b".into()
                },
                "d"
            )
            .to_string(),
            r#"spec.x: Invalid value: "a/b": d"#
        );
        assert_eq!(
            e(ErrorKind::Forbidden, "d").to_string(),
            "spec.x: Forbidden: d"
        );
        let not_supported = ErrorKind::NotSupported {
            value: "v".into(),
            allowed: vec!["a".into()],
        };
        let err = e(not_supported, r#"supported values: "a""#);
        assert_eq!(
            err.message(),
            r#"Unsupported value: "v": supported values: "a""#
        );
        assert_eq!(err.reason(), "FieldValueNotSupported");
        assert_eq!(e(ErrorKind::Required, "d").reason(), "FieldValueRequired");
    }

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
    fn known_providers() {
        assert_eq!(known_provider("aws"), Some(Provider::Aws));
        assert_eq!(known_provider("velero.io/gcp"), Some(Provider::Gcp));
        assert_eq!(known_provider("azure"), Some(Provider::Azure));
        assert_eq!(known_provider("example.io/aws"), None);
        assert_eq!(known_provider("AWS"), None);
        assert_eq!(known_provider("velero.io/velero.io/aws"), None);
        assert_eq!(Provider::Azure.plugin_name(), "velero.io/azure");
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

    fn with_ca(pem: &[u8]) -> BackupStorageLocationSpec {
        let mut s = spec("aws", "b");
        s.object_storage.ca_cert = Some(ByteString(pem.to_vec()));
        s
    }

    const DEPRECATED: &str = "spec.objectStorage.caCert: inline caCert is deprecated; prefer caCertRef to a Secret holding the CA bundle";

    #[test]
    fn ca_cert_rules() {
        let pem = cert_pem();
        let r = validate(&with_ca(pem.as_bytes()));
        assert!(r.errors.is_empty(), "{r:?}");
        assert_eq!(r.warnings, [DEPRECATED]);

        let r = validate(&with_ca(b"not a certificate"));
        assert_eq!(
            messages(&r),
            [
                r#"spec.objectStorage.caCert: Invalid value: "not a certificate": must be a PEM bundle with at least one valid -----BEGIN CERTIFICATE----- block"#
            ]
        );

        let broken = format!("{PEM_BEGIN}\nMIIB!!!\n{PEM_END}\n");
        assert_eq!(
            paths(&validate(&with_ca(broken.as_bytes()))),
            ["spec.objectStorage.caCert"]
        );
        // A PEM key block is not a certificate.
        let key = "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n";
        assert_eq!(
            paths(&validate(&with_ca(key.as_bytes()))),
            ["spec.objectStorage.caCert"]
        );

        let r = validate(&with_ca(format!("{pem}{broken}").as_bytes()));
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings[1],
            "spec.objectStorage.caCert: 1 malformed certificate block(s) will be ignored"
        );

        let twice = ByteString(pem.into_bytes());
        let encoded = serde_json::to_value(&twice).ok();
        let text = encoded.as_ref().and_then(Value::as_str).unwrap_or_default();
        let r = validate(&with_ca(text.as_bytes()));
        assert!(r.errors[0].detail.contains("base64-encoded twice"), "{r:?}");

        let r = validate(&with_ca(b""));
        assert!(r.errors.is_empty());
        assert_eq!(
            r.warnings,
            ["spec.objectStorage.caCert: is empty and has no effect; remove it"]
        );
    }

    #[test]
    fn der_length_must_match() {
        assert!(is_der_sequence(&[0x30, 0x01, 0x00]));
        assert!(is_der_sequence(&[0x30, 0x81, 0x01, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x02, 0x00]));
        assert!(!is_der_sequence(&[0x31, 0x01, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x80]));
        assert!(!is_der_sequence(&[0x30]));
        assert_eq!(base64_decode("TWFu"), Some(b"Man".to_vec()));
        assert_eq!(base64_decode("TW E=\n"), Some(b"Ma".to_vec()));
        assert_eq!(base64_decode("TQ=="), Some(b"M".to_vec()));
        assert_eq!(base64_decode("TQ="), None);
        assert_eq!(base64_decode("T=Q="), None);
    }

    #[test]
    fn ca_cert_and_ref_are_exclusive() {
        let mut s = with_ca(cert_pem().as_bytes());
        s.object_storage.ca_cert_ref = Some(selector(Some("ca"), "ca.crt"));
        let r = validate(&s);
        assert_eq!(
            messages(&r),
            [
                "spec.objectStorage: Forbidden: cannot specify both caCert and caCertRef in objectStorage; remove caCert and keep caCertRef"
            ]
        );
    }

    #[test]
    fn secret_ref_rules() {
        let mut s = spec("aws", "b");
        s.credential = Some(selector(Some("cloud-credentials"), "cloud"));
        s.object_storage.ca_cert_ref = Some(selector(Some("ca"), "ca.crt"));
        assert_clean(&s);

        s.credential = Some(selector(None, ""));
        s.object_storage.ca_cert_ref = Some(selector(Some(""), ""));
        let r = validate(&s);
        assert_eq!(
            paths(&r),
            [
                "spec.objectStorage.caCertRef.name",
                "spec.objectStorage.caCertRef.key",
                "spec.credential.name",
                "spec.credential.key"
            ]
        );
        assert_eq!(
            r.errors[2].to_string(),
            "spec.credential.name: Required value: set the name of the Secret, in the BSL's namespace, that holds the credentials file"
        );

        s.credential = Some(selector(Some("Bad_Name"), "a/b"));
        s.object_storage.ca_cert_ref = Some(selector(Some("ca"), ".."));
        let r = validate(&s);
        assert_eq!(
            paths(&r),
            [
                "spec.objectStorage.caCertRef.key",
                "spec.credential.name",
                "spec.credential.key"
            ]
        );
        assert!(
            r.errors
                .iter()
                .all(|e| matches!(e.kind, ErrorKind::Invalid { .. }))
        );
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
    fn gcp_config_rules() {
        let gcp = |kv: &[(&str, &str)]| validate(&with_config(spec("gcp", "b"), kv));
        let all = [
            ("kmsKeyName", "k"),
            ("serviceAccount", "sa@p.iam.gserviceaccount.com"),
            ("credentialsFile", "/creds"),
            ("storeEndpoint", "https://storage.example.com/storage/v1/"),
        ];
        assert_eq!(gcp(&all), Report::default());
        assert_eq!(
            paths(&gcp(&[("storeEndpoint", "storage.example.com")])),
            ["spec.config.storeEndpoint"]
        );
    }

    #[test]
    fn azure_config_rules() {
        let all = [
            ("resourceGroup", "rg"),
            ("subscriptionId", "sub"),
            ("storageAccountKeyEnvVar", "KEY"),
            ("storageAccountSASTokenEnvVar", "SAS"),
            ("storageAccountURI", "https://sa.blob.core.windows.net"),
            (
                "storageAccountBlobEndpoint",
                "https://sa.blob.core.windows.net",
            ),
            (
                "activeDirectoryAuthorityURI",
                "https://login.microsoftonline.us/",
            ),
            ("useAAD", "true"),
            ("blockSizeInBytes", "104857600"),
        ];
        assert_clean(&azure(&all));

        let r = validate(&with_config(
            spec("azure", "c"),
            &[("storageAccountURI", "https://sa.blob.core.windows.net")],
        ));
        assert_eq!(
            messages(&r),
            [
                "spec.config.storageAccount: Required value: set the storage account name; the azure plugin fails without it, even when storageAccountURI is set"
            ]
        );
        assert_eq!(
            paths(&validate(&spec("azure", "c"))),
            ["spec.config.storageAccount"]
        );

        assert_eq!(
            paths(&validate(&azure(&[("useAAD", "yes")]))),
            ["spec.config.useAAD"]
        );
        for key in [
            "storageAccountURI",
            "storageAccountBlobEndpoint",
            "activeDirectoryAuthorityURI",
        ] {
            let r = validate(&azure(&[(key, "sa.blob.core.windows.net")]));
            assert_eq!(paths(&r), [config_path(key)]);
        }
        for bad in ["0", "-1", "abc", "", "104857601"] {
            let r = validate(&azure(&[("blockSizeInBytes", bad)]));
            assert!(r.errors.is_empty(), "{bad}");
            assert_eq!(r.warnings.len(), 1, "{bad}");
        }
        assert_eq!(
            validate(&azure(&[("blockSizeInBytes", "abc")])).warnings,
            [
                r#"spec.config.blockSizeInBytes: "abc" is not in 1..104857600; the plugin uses 104857600"#
            ]
        );
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

    #[test]
    fn shape_tables_match_the_types() {
        let full = BackupStorageLocationSpec {
            provider: "aws".into(),
            config: Some([("region".to_string(), "r".to_string())].into()),
            credential: Some(SecretKeySelector {
                key: "k".into(),
                name: Some("n".into()),
                optional: Some(true),
            }),
            object_storage: ObjectStorageLocation {
                bucket: "b".into(),
                prefix: Some("p".into()),
                ca_cert: Some(ByteString(cert_pem().into_bytes())),
                ca_cert_ref: Some(selector(Some("n"), "k")),
            },
            default: Some(true),
            access_mode: Some("ReadOnly".into()),
            backup_sync_period: Some("1m".into()),
            validation_frequency: Some("1m".into()),
        };
        let Ok(v) = serde_json::to_value(&full) else {
            panic!("spec serializes");
        };
        let mut r = Report::default();
        check_shape(&v, Shape::Obj(SPEC), "spec", &mut r);
        assert_eq!(r, Report::default());
    }
}
