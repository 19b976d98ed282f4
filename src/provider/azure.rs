//! Velero's azure plugin (velero-plugin-for-microsoft-azure): its config keys and checks, its
//! endpoint (the account's blob service, or storageAccountURI), its env-style credentials file,
//! and the Azure blob store object_store builds.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::client::HttpConnector;
use object_store::{ObjectStore, RetryConfig};
use url::Url;

use super::{Config, Refusal, Secret, StoreConfig, Target, parse_endpoint_url, value};
use crate::rules::config::{check_bool, check_url, config_path};
use crate::rules::report::{ErrorKind, Report, short_n};

pub(crate) const CONFIG_KEYS: [&str; 10] = [
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
];

pub(crate) fn check_config(config: &Config, r: &mut Report) {
    // Both the plugin and Velero's Azure client fail without it, even with storageAccountURI.
    if value(config, "storageAccount").is_none() {
        r.error(
            config_path("storageAccount"),
            ErrorKind::Required,
            "set the storage account name; the azure plugin fails without it, even when storageAccountURI is set",
        );
    }
    check_bool(config, "useAAD", r);
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

pub(crate) fn endpoint(config: &Config) -> Target {
    let uri = value(config, "storageAccountURI")
        .map(|v| ("storageAccountURI", v))
        .or_else(|| {
            value(config, "storageAccountBlobEndpoint").map(|v| ("storageAccountBlobEndpoint", v))
        });
    match uri {
        Some((key, v)) => {
            let (origin, parsed) = parse_endpoint_url(key, v);
            Target {
                key: origin,
                url: parsed.map(|u| u.as_str().trim_end_matches('/').to_string()),
                virtual_hosted: false,
            }
        }
        None => {
            let account = value(config, "storageAccount").unwrap_or_default();
            let url = format!("https://{account}.blob.core.windows.net");
            Target {
                key: url.clone(),
                url: if account.is_empty() {
                    Err("config.storageAccount is required".into())
                } else {
                    Ok(url)
                },
                virtual_hosted: false,
            }
        }
    }
}

/// The account name: config.storageAccount, else the URL's first host label
/// (`<account>.blob.core.windows.net`) or, for a path-style emulator URL, its first segment.
fn account(config: &Config, url: &str) -> Option<String> {
    if let Some(account) = value(config, "storageAccount") {
        return Some(account.to_string());
    }
    let url = Url::parse(url).ok()?;
    match url.domain() {
        Some(host) if host.contains(".blob.") => host.split('.').next().map(str::to_string),
        _ => url
            .path_segments()?
            .find(|s| !s.is_empty())
            .map(str::to_string),
    }
}

pub(crate) fn store(
    config: &Config,
    credential: Option<&str>,
) -> Result<(String, StoreConfig), Refusal> {
    let endpoint = endpoint(config);
    let url = endpoint.url.map_err(Refusal::Invalid)?;
    let account = account(config, &url).ok_or_else(|| {
        Refusal::Invalid("config.storageAccount is required to sign requests".into())
    })?;
    let auth = match credential {
        Some(file) => Some(auth(config, &env_lines(file))?),
        None => None,
    };
    Ok((
        endpoint.key,
        StoreConfig::Azure(Store { account, url, auth }),
    ))
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Store {
    pub account: String,
    pub url: String,
    /// None: the default credential chain.
    pub auth: Option<Auth>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Auth {
    Key(Secret),
    Sas(Secret),
    ClientSecret {
        client_id: String,
        secret: Secret,
        tenant_id: String,
    },
}

impl Store {
    pub fn secrets(&self) -> Vec<String> {
        match &self.auth {
            Some(Auth::Key(k) | Auth::Sas(k)) => vec![k.0.clone()],
            Some(Auth::ClientSecret { secret, .. }) => vec![secret.0.clone()],
            None => Vec::new(),
        }
    }

    pub fn build(
        &self,
        bucket: &str,
        retry: RetryConfig,
        connector: impl HttpConnector,
    ) -> object_store::Result<Arc<dyn ObjectStore>> {
        let builder = match &self.auth {
            Some(Auth::Key(key)) => MicrosoftAzureBuilder::new().with_access_key(&key.0),
            Some(Auth::Sas(token)) => {
                MicrosoftAzureBuilder::new().with_config(AzureConfigKey::SasKey, &token.0)
            }
            Some(Auth::ClientSecret {
                client_id,
                secret,
                tenant_id,
            }) => MicrosoftAzureBuilder::new()
                .with_client_secret_authorization(client_id, &secret.0, tenant_id),
            None => MicrosoftAzureBuilder::from_env(),
        };
        Ok(Arc::new(
            builder
                .with_account(&self.account)
                .with_container_name(bucket)
                .with_endpoint(self.url.clone())
                .with_allow_http(true)
                .with_retry(retry)
                .with_http_connector(connector)
                .build()?,
        ))
    }
}

/// How the azure plugin authenticates from its credentials file: the account key, else a SAS
/// token, else an Azure AD client secret.
fn auth(config: &Config, vars: &HashMap<String, String>) -> Result<Auth, Refusal> {
    let key_var = value(config, "storageAccountKeyEnvVar");
    let sas_var = value(config, "storageAccountSASTokenEnvVar");
    let get = |name: &str| vars.get(name).filter(|v| !v.is_empty()).cloned();
    if let Some(key) = get(key_var.unwrap_or("AZURE_STORAGE_ACCOUNT_ACCESS_KEY")) {
        return Ok(Auth::Key(Secret(key)));
    }
    if let Some(name) = key_var {
        return Err(Refusal::Invalid(format!(
            "the credentials file has no {name} (named by config.storageAccountKeyEnvVar)"
        )));
    }
    if let Some(name) = sas_var {
        return match get(name) {
            Some(token) => Ok(Auth::Sas(Secret(token.trim_start_matches('?').to_string()))),
            None => Err(Refusal::Invalid(format!(
                "the credentials file has no {name} (named by config.storageAccountSASTokenEnvVar)"
            ))),
        };
    }
    match (
        get("AZURE_CLIENT_ID"),
        get("AZURE_CLIENT_SECRET"),
        get("AZURE_TENANT_ID"),
    ) {
        (Some(client_id), Some(secret), Some(tenant_id)) => Ok(Auth::ClientSecret {
            client_id,
            secret: Secret(secret),
            tenant_id,
        }),
        _ => Err(Refusal::Unsupported(
            "bsl-sentinel cannot use the Azure credentials in the credentials file (no \
             AZURE_STORAGE_ACCOUNT_ACCESS_KEY, SAS token or client secret); the phase is left \
             to Velero"
                .into(),
        )),
    }
}

/// `NAME=value` lines as Velero's godotenv reads them: comments, `export `, quotes.
fn env_lines(file: &str) -> HashMap<String, String> {
    file.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.starts_with('#') {
                return None;
            }
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (name, value) = line.split_once('=')?;
            let value = value.trim();
            let value = [('"', '"'), ('\'', '\'')]
                .iter()
                .find_map(|(open, close)| value.strip_prefix(*open)?.strip_suffix(*close))
                .unwrap_or(value);
            Some((name.trim().to_string(), value.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::rules::config::config_path;
    use crate::rules::testing::*;
    use crate::rules::validate;

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
}
