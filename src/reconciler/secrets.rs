//! The Secrets the checks read, shared for a short time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

/// One Secret as last read (None inside: it did not exist), and when; locked while read.
type SecretSlot = tokio::sync::Mutex<Option<(Instant, Option<Secret>)>>;

/// Secrets read with `get` (the only verb bsl-sentinel needs on them), shared for a short
/// time: a thousand BSLs naming one Secret cause one read, not a thousand.
pub(super) struct SecretCache {
    client: kube::Client,
    ttl: Duration,
    entries: Mutex<HashMap<(String, String), Arc<SecretSlot>>>,
}

impl SecretCache {
    pub(super) fn new(client: kube::Client, ttl: Duration) -> SecretCache {
        SecretCache {
            client,
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The bytes of one key; the error is the message for the BSL's status.
    pub(super) async fn key(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Vec<u8>, String> {
        let entry = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((namespace.to_string(), name.to_string()))
            .or_default()
            .clone();
        let mut slot = entry.lock().await;
        let fresh = slot.as_ref().is_some_and(|(at, _)| at.elapsed() < self.ttl);
        if !fresh {
            let secret = read(&self.client, namespace, name).await?;
            *slot = Some((Instant::now(), secret));
        }
        key_of(
            slot.as_ref().and_then(|(_, s)| s.as_ref()),
            namespace,
            name,
            key,
        )
    }
}

/// Reads one Secret (None: it does not exist), as the checks and `diagnose` read them; the
/// error is the message for the BSL's status.
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Secret>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .map_err(|e| format!("cannot read Secret {name:?}: {e}"))
}

/// The bytes of one key of a Secret as read; the error is the message for the BSL's status.
pub fn key_of(
    secret: Option<&Secret>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Vec<u8>, String> {
    let secret =
        secret.ok_or_else(|| format!("Secret {name:?} not found in namespace {namespace:?}"))?;
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| v.0.clone())
        .ok_or_else(|| format!("Secret {name:?} has no key {key:?}"))
}
