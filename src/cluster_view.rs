//! Watch caches the admission webhook reads for its warnings, in bsl-sentinel's namespace
//! (Velero's): the BSLs (as [`StoredBsl`], so a malformed one never breaks the list) and the
//! metadata of Secrets. A request never waits on the API; other namespaces get no such
//! warnings.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::admission::ClusterView;
use crate::bsl::StoredBsl;

#[derive(Clone)]
pub struct Caches {
    bsls: Store<StoredBsl>,
    bsls_ready: Arc<AtomicBool>,
    secrets: Store<PartialObjectMeta<Secret>>,
    secrets_ready: Arc<AtomicBool>,
    namespace: String,
}

impl Caches {
    /// Starts the watches on the current tokio runtime; they run until the process ends and
    /// retry with backoff on errors (missing RBAC only costs the warnings that need them).
    pub fn start(client: kube::Client, namespace: &str) -> Caches {
        let (bsls, bsl_writer) = reflector::store();
        let bsl_api: Api<StoredBsl> = Api::namespaced(client.clone(), namespace);
        let bsl_stream =
            reflector::reflector(bsl_writer, watcher(bsl_api, watcher::Config::default()));

        let (secrets, secret_writer) = reflector::store();
        // Metadata only: the webhook needs to know a Secret exists, never its data.
        let secret_api: Api<PartialObjectMeta<Secret>> = Api::namespaced(client, namespace);
        let secret_stream = reflector::reflector(
            secret_writer,
            watcher(secret_api, watcher::Config::default()),
        );

        let caches = Caches {
            bsls,
            bsls_ready: Arc::default(),
            secrets,
            secrets_ready: Arc::default(),
            namespace: namespace.to_string(),
        };
        tokio::spawn(drain(
            "backupstoragelocations",
            bsl_stream.default_backoff(),
        ));
        tokio::spawn(drain("secrets", secret_stream.default_backoff()));
        tokio::spawn(mark_ready(caches.bsls.clone(), caches.bsls_ready.clone()));
        tokio::spawn(mark_ready(
            caches.secrets.clone(),
            caches.secrets_ready.clone(),
        ));
        caches
    }
}

async fn drain<S, T>(what: &'static str, stream: S)
where
    S: futures::Stream<Item = Result<T, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    // A watch failing while the apiserver is away is logged once, and its return once.
    let mut failures = 0u64;
    while let Some(item) = stream.next().await {
        match item {
            Err(e) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(watch = what, error = %e, "watch failed; retrying with backoff");
                }
            }
            Ok(_) if failures > 0 => {
                tracing::info!(watch = what, failures, "watch works again");
                failures = 0;
            }
            Ok(_) => {}
        }
    }
}

async fn mark_ready<K>(store: Store<K>, ready: Arc<AtomicBool>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    if store.wait_until_ready().await.is_ok() {
        ready.store(true, Ordering::Release);
    }
}

impl ClusterView for Caches {
    fn defaults(&self, namespace: &str) -> Option<Vec<String>> {
        if namespace != self.namespace || !self.bsls_ready.load(Ordering::Acquire) {
            return None;
        }
        let names = self
            .bsls
            .state()
            .iter()
            .filter(|b| b.default)
            .filter_map(|b| b.metadata.name.clone())
            .collect();
        Some(names)
    }

    fn secret_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        if namespace != self.namespace || !self.secrets_ready.load(Ordering::Acquire) {
            return None;
        }
        Some(
            self.secrets
                .get(&ObjectRef::new(name).within(namespace))
                .is_some(),
        )
    }
}
