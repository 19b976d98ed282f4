//! What bsl-sentinel knows of each object store plugin Velero ships (aws, gcp, azure): the
//! config keys the plugin accepts and how it judges them, where its requests go, how its
//! credentials file reads, and how object_store is set up to list its bucket. One module per
//! provider; the rule engine ([`crate::rules`]) and the probe ([`crate::storage`]) are engines
//! over [`Provider`], so that what the webhook admits is what the probe can check.
//!
//! An enum rather than a trait object: the set is closed (the plugins Velero maintains; any
//! other plugin is left to Velero), a provider is a Copy value the reconciler labels metrics
//! with, and each method is one `match` that hands over to the provider's module.

pub mod aws;
pub mod azure;
pub mod gcp;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use object_store::client::HttpConnector;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};
use url::Url;

use crate::rules::report::Report;

/// A BSL's spec.config.
pub type Config = BTreeMap<String, String>;

/// The object store plugins whose config bsl-sentinel knows; others pass unchecked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    Aws,
    Gcp,
    Azure,
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

impl Provider {
    /// The name the plugin registers, which Velero looks the provider up by.
    pub fn plugin_name(self) -> &'static str {
        match self {
            Provider::Aws => "velero.io/aws",
            Provider::Gcp => "velero.io/gcp",
            Provider::Azure => "velero.io/azure",
        }
    }

    /// The plugin's own config keys (Velero adds bucket, prefix, caCert and credentialsFile).
    pub fn config_keys(self) -> &'static [&'static str] {
        match self {
            Provider::Aws => &aws::CONFIG_KEYS,
            Provider::Gcp => &gcp::CONFIG_KEYS,
            Provider::Azure => &azure::CONFIG_KEYS,
        }
    }

    /// The plugin's checks of its config values, beyond the keys.
    pub(crate) fn check_config(self, config: &Config, r: &mut Report) {
        match self {
            Provider::Aws => aws::check_config(config, r),
            Provider::Gcp => gcp::check_config(config, r),
            Provider::Azure => azure::check_config(config, r),
        }
    }

    /// The URL scheme users know a location by: `s3://`, `gs://`, `azure://`.
    pub fn scheme(self) -> &'static str {
        match self {
            Provider::Aws => "s3",
            Provider::Gcp => "gs",
            Provider::Azure => "azure",
        }
    }

    /// "bucket" or, on Azure, "container".
    pub fn container_word(self) -> &'static str {
        match self {
            Provider::Azure => "container",
            Provider::Aws | Provider::Gcp => "bucket",
        }
    }

    /// Where the requests for a bucket go.
    pub(crate) fn endpoint(self, config: &Config, bucket: &str) -> Target {
        match self {
            Provider::Aws => aws::endpoint(config, bucket),
            Provider::Gcp => gcp::endpoint(config),
            Provider::Azure => azure::endpoint(config),
        }
    }

    /// The endpoint key and the store to build, from the config and the credentials file.
    pub(crate) fn store(
        self,
        config: &Config,
        bucket: &str,
        credential: Option<&str>,
    ) -> Result<(String, StoreConfig), Refusal> {
        match self {
            Provider::Aws => aws::store(config, bucket, credential),
            Provider::Gcp => gcp::store(config, credential),
            Provider::Azure => azure::store(config, credential),
        }
    }
}

/// A config value as the plugins read it: as written, and unset when empty (Go's
/// `config[key] == ""`). The rules and the probe read every value through this, so both judge
/// the same text.
pub fn value<'a>(config: &'a Config, key: &str) -> Option<&'a str> {
    config
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// Go's strconv.ParseBool, which the plugins parse their booleans with.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The one judgement of an endpoint URL in a config (s3Url, storeEndpoint, storageAccountURI,
/// ...), by the url crate the probe connects with. It also refuses what the url crate would
/// quietly mend but the plugin, reading the value with Go's url.Parse, could not use: no
/// `http(s)://` as written, control characters, whitespace in the host or at the end, an empty
/// authority (`https:///h`), port 0.
pub fn http_url(s: &str) -> Result<Url, &'static str> {
    const NO_HOST: &str = "must name a host after the scheme, e.g. https://storage.example.com";
    const BAD_PORT: &str = "has a port that is not a number from 1 to 65535";
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
    if authority.is_empty() || authority.contains(|c: char| c.is_whitespace() || c == '\\') {
        return Err(NO_HOST);
    }
    if s.ends_with(char::is_whitespace) {
        return Err("must not end with whitespace");
    }
    let url = Url::parse(s).map_err(|e| match e {
        url::ParseError::InvalidPort => BAD_PORT,
        url::ParseError::EmptyHost => NO_HOST,
        _ => "has a host that is not a valid name or IP address",
    })?;
    if url.host_str().is_none_or(str::is_empty) {
        Err(NO_HOST)
    } else if url.port() == Some(0) {
        Err(BAD_PORT)
    } else {
        Ok(url)
    }
}

/// Where the requests of a spec go.
pub(crate) struct Target {
    /// The endpoint key: the origin of the service.
    pub key: String,
    /// The URL given to object_store.
    pub url: Result<String, String>,
    pub virtual_hosted: bool,
}

/// The endpoint of a URL config value: its origin, or the value itself when it is no URL the
/// probe can use (the plan reports that).
pub(crate) fn parse_endpoint_url(key: &str, value: &str) -> (String, Result<Url, String>) {
    match http_url(value) {
        Ok(url) => (url.origin().ascii_serialization(), Ok(url)),
        Err(_) => (
            value.to_string(),
            Err(format!(
                "config.{key} must be an http:// or https:// URL, not {value:?}"
            )),
        ),
    }
}

/// A credential value: compared and hashed, never printed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(REDACTED)")
    }
}

/// Why a check is not made.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The spec or its credentials cannot work: Unavailable(Config).
    Invalid(String),
    /// bsl-sentinel cannot tell: Unchecked.
    Unsupported(String),
}

/// How object_store is set up for one provider's bucket; equal configs build equal stores.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum StoreConfig {
    Aws(aws::Store),
    Gcp(gcp::Store),
    Azure(azure::Store),
}

impl StoreConfig {
    /// The values no message may show.
    pub fn secrets(&self) -> Vec<String> {
        match self {
            StoreConfig::Aws(s) => s.secrets(),
            StoreConfig::Gcp(s) => s.secrets(),
            StoreConfig::Azure(s) => s.secrets(),
        }
    }

    /// The URL the store sends its requests to.
    pub fn url(&self) -> &str {
        match self {
            StoreConfig::Aws(s) => &s.url,
            StoreConfig::Gcp(s) => &s.base_url,
            StoreConfig::Azure(s) => &s.url,
        }
    }

    /// The store listing `bucket`, sending through `connector`.
    pub fn build(
        &self,
        bucket: &str,
        connector: impl HttpConnector,
        timeout: Duration,
    ) -> object_store::Result<Arc<dyn ObjectStore>> {
        // One quick retry: a pooled connection the server has closed meanwhile fails the first
        // attempt ("connection closed before message completed"); more would only delay the
        // verdict on a dead endpoint, and the check's timeout stays the one clock.
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_millis(200),
                base: 2.0,
            },
            max_retries: 1,
            retry_timeout: timeout,
        };
        match self {
            StoreConfig::Aws(s) => s.build(bucket, retry, connector),
            StoreConfig::Gcp(s) => s.build(bucket, retry, connector),
            StoreConfig::Azure(s) => s.build(bucket, retry, connector),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::{paths, spec, with_config};
    use crate::rules::validate;

    /// Endpoint URLs that have fooled one parser or another, and whether they can work.
    const TRICKY_URLS: [(&str, bool); 27] = [
        ("https://s3.example.com", true),
        ("http://minio:9000/", true),
        ("HTTPS://S3.Example.com", true),
        ("https://s3.example.com/some/path/", true),
        ("https://s3.example.com/a b", true),
        ("https://u:p@s3.example.com", true),
        ("HTTPS://u:p@[::1]:9000/x?y", true),
        ("http://[::1]:9000", true),
        ("http://10.0.0.1:65535", true),
        ("s3.example.com", false),
        ("minio:9000", false),
        ("ftp://s3.example.com", false),
        ("s3://bucket", false),
        ("http:/s3.example.com", false),
        ("https://", false),
        ("https://:9000", false),
        ("https:///s3.example.com", false),
        ("https://u:p@", false),
        ("https://s3 example.com", false),
        (" https://s3.example.com", false),
        ("https://s3.example.com ", false),
        ("http://s3.example.com\n", false),
        ("http://s3.example.com\\x", false),
        ("http://[::1", false),
        ("http://h:0", false),
        ("http://h:99999", false),
        ("http://h:x", false),
    ];

    /// For every URL key the probe connects to: the rules admit exactly the URLs the probe's
    /// endpoint code can use, and reject exactly those it cannot.
    #[test]
    fn rules_and_probe_agree_on_endpoint_urls() {
        let keys = [
            (Provider::Aws, "s3Url"),
            (Provider::Gcp, "storeEndpoint"),
            (Provider::Azure, "storageAccountURI"),
            (Provider::Azure, "storageAccountBlobEndpoint"),
        ];
        for (provider, key) in keys {
            for (url, works) in TRICKY_URLS {
                let mut kv = vec![(key, url)];
                match provider {
                    Provider::Aws => kv.extend([("region", "r"), ("s3ForcePathStyle", "true")]),
                    Provider::Azure => kv.push(("storageAccount", "sa")),
                    Provider::Gcp => {}
                }
                let s = with_config(spec(provider.plugin_name(), "bucket"), &kv);
                let admitted = validate(&s).errors.is_empty();
                let config = s.config.clone().unwrap_or_default();
                let target = provider.endpoint(&config, "bucket");
                let stored = provider.store(&config, "bucket", None);
                assert_eq!(admitted, works, "{key}={url:?}: {:?}", paths(&validate(&s)));
                assert_eq!(target.url.is_ok(), works, "{key}={url:?}: {:?}", target.url);
                assert_eq!(stored.is_ok(), works, "{key}={url:?}: {stored:?}");
            }
        }
    }

    #[test]
    fn endpoint_key_is_the_origin() {
        for (url, origin) in [
            ("HTTPS://u:p@[::1]:9000/x?y", "https://[::1]:9000"),
            ("http://minio:80/path/", "http://minio"),
            ("https://S3.Example.com:443", "https://s3.example.com"),
        ] {
            assert_eq!(parse_endpoint_url("s3Url", url).0, origin, "{url}");
        }
        let (key, url) = parse_endpoint_url("s3Url", "http://h:99999");
        assert_eq!(key, "http://h:99999");
        assert_eq!(
            url,
            Err(r#"config.s3Url must be an http:// or https:// URL, not "http://h:99999""#.into())
        );
    }

    #[test]
    fn url_judgement_says_why() {
        let why = |url| http_url(url).err();
        assert_eq!(
            why("ftp://h"),
            Some(
                "must be a URL starting with http:// or https://, e.g. https://storage.example.com"
            )
        );
        assert_eq!(
            why("http://h\n"),
            Some("must not contain control characters")
        );
        assert_eq!(
            why("https:///h"),
            Some("must name a host after the scheme, e.g. https://storage.example.com")
        );
        assert_eq!(why("http://h/ "), Some("must not end with whitespace"));
        assert_eq!(
            why("http://h:0"),
            Some("has a port that is not a number from 1 to 65535")
        );
        assert_eq!(
            why("http://[::1"),
            Some("has a host that is not a valid name or IP address")
        );
    }

    #[test]
    fn go_bools() {
        for (s, b) in [("1", true), ("True", true), ("F", false), ("FALSE", false)] {
            assert_eq!(parse_go_bool(s), Some(b), "{s}");
        }
        for s in ["", "yes", "tRUE", " true", "2"] {
            assert_eq!(parse_go_bool(s), None, "{s}");
        }
    }

    #[test]
    fn values_are_read_as_written() {
        let config: Config = [("a", ""), ("b", " "), ("c", " x ")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(value(&config, "a"), None);
        assert_eq!(value(&config, "b"), Some(" "));
        assert_eq!(value(&config, "c"), Some(" x "));
        assert_eq!(value(&config, "missing"), None);
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
}
