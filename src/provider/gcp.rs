//! Velero's gcp plugin (velero-plugin-for-gcp): its config keys, its endpoint (Google's, or
//! storeEndpoint for another GCS service), its service-account JSON, and the GCS store
//! object_store builds.

use std::sync::Arc;

use object_store::client::HttpConnector;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::{ObjectStore, RetryConfig};

use super::{Config, Refusal, Secret, StoreConfig, Target, parse_endpoint_url, value};
use crate::rules::config::check_url;
use crate::rules::report::Report;

pub(crate) const CONFIG_KEYS: [&str; 3] = ["kmsKeyName", "serviceAccount", "storeEndpoint"];

const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";

pub(crate) fn check_config(config: &Config, r: &mut Report) {
    check_url(config, "storeEndpoint", r);
}

pub(crate) fn endpoint(config: &Config) -> Target {
    let Some(v) = value(config, "storeEndpoint") else {
        return Target {
            key: DEFAULT_ENDPOINT.to_string(),
            url: Ok(DEFAULT_ENDPOINT.to_string()),
            virtual_hosted: false,
        };
    };
    let (key, parsed) = parse_endpoint_url("storeEndpoint", v);
    // Velero's plugin takes the JSON API's endpoint (often ending in /storage/v1/); object_store
    // wants the service root.
    let url = parsed.map(|url| {
        let url = url.as_str().trim_end_matches('/');
        url.strip_suffix("/storage/v1").unwrap_or(url).to_string()
    });
    Target {
        key,
        url,
        virtual_hosted: false,
    }
}

pub(crate) fn store(
    config: &Config,
    credential: Option<&str>,
) -> Result<(String, StoreConfig), Refusal> {
    let endpoint = endpoint(config);
    let base_url = endpoint.url.map_err(Refusal::Invalid)?;
    let service_account = credential.map(service_account).transpose()?;
    Ok((
        endpoint.key,
        StoreConfig::Gcp(Store {
            base_url,
            service_account,
        }),
    ))
}

/// The credentials file as a service-account key; other kinds of Google credentials are not
/// what object_store can sign with.
fn service_account(json: &str) -> Result<Secret, Refusal> {
    let parsed: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| Refusal::Invalid(format!("the credentials file is not JSON: {e}")))?;
    match parsed.get("type").and_then(|t| t.as_str()) {
        None | Some("service_account") => Ok(Secret(json.to_string())),
        Some(other) => Err(Refusal::Unsupported(format!(
            "bsl-sentinel cannot use Google credentials of type {other:?}; the phase is left to \
             Velero"
        ))),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Store {
    pub base_url: String,
    /// The service-account JSON; None: the default credential chain.
    pub service_account: Option<Secret>,
}

impl Store {
    pub fn secrets(&self) -> Vec<String> {
        self.service_account.iter().map(|s| s.0.clone()).collect()
    }

    pub fn build(
        &self,
        bucket: &str,
        retry: RetryConfig,
        connector: impl HttpConnector,
    ) -> object_store::Result<Arc<dyn ObjectStore>> {
        let builder = match &self.service_account {
            Some(key) => GoogleCloudStorageBuilder::new().with_service_account_key(&key.0),
            None => GoogleCloudStorageBuilder::from_env(),
        };
        Ok(Arc::new(
            builder
                .with_bucket_name(bucket)
                .with_base_url(&self.base_url)
                .with_retry(retry)
                .with_http_connector(connector)
                .build()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::rules::testing::*;
    use crate::rules::{Report, validate};

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
}
