//! The storage probe: Velero's validity check of a BackupStorageLocation (IsValid in
//! pkg/persistence/object_store.go), made against the aws, gcp and azure object stores through
//! object_store.
//!
//! Pure core: planning a check from the spec and the Secrets' bytes ([`plan`]), judging the
//! listing ([`check_layout`]), classifying failures and sanitizing messages. Thin edge
//! ([`Probe`]): shared HTTP clients, a semaphore per endpoint, a cache of built stores and the one
//! listing.
//!
//! Connections: a check holds one of its endpoint's `per_endpoint` permits while it runs, and
//! its requests go through that endpoint's `per_endpoint` lanes ([`crate::connections`]), so a
//! thousand BSLs on one endpoint have at most `per_endpoint` sockets open to it, reused from
//! check to check.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequestBody, HttpService,
};
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use url::Url;

use crate::bsl::BackupStorageLocationSpec;
use crate::connections::{self, Progress};
use crate::duration::GoDuration;
use crate::endpoints::{Contact, Endpoint, Place, Turn, Wakeups};
use crate::proxy::Proxies;
use crate::rules::{self, Provider};

/// The result of one check, as the reconciler turns it into a phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Available,
    /// `message` is sanitized and at most [`MAX_MESSAGE`] characters, without the BSL's name.
    Unavailable {
        reason: FailureReason,
        message: String,
    },
    /// bsl-sentinel cannot check this location (a plugin provider, or credentials object_store
    /// cannot use); Velero's own validation decides.
    Unchecked {
        message: String,
    },
}

/// Why a location is unavailable, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureReason {
    Timeout,
    Unreachable,
    Auth,
    NotFound,
    Layout,
    Config,
    Other,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Timeout => "timeout",
            FailureReason::Unreachable => "unreachable",
            FailureReason::Auth => "auth",
            FailureReason::NotFound => "not_found",
            FailureReason::Layout => "layout",
            FailureReason::Config => "config",
            FailureReason::Other => "other",
        }
    }
}

/// Longest message a check returns; Velero's own messages are short, and the status is shown by
/// `kubectl get -o wide`.
pub const MAX_MESSAGE: usize = 512;

/// The region of an aws BSL that names none, as in Velero's plugin.
const AWS_DEFAULT_REGION: &str = "us-east-1";

/// AWS's global S3 endpoint, where a bucket's region is looked up.
const AWS_GLOBAL: &str = "https://s3.amazonaws.com";

/// Built stores kept for reuse; beyond this the least recently used is dropped.
const MAX_STORES: usize = 1024;
/// Endpoints, and TLS settings, kept; beyond this the unused ones are dropped.
const MAX_ENDPOINTS: usize = 256;

/// The storage probe, shared by all checks.
pub struct Probe {
    per_endpoint: usize,
    timeout: Duration,
    proxies: Arc<Proxies>,
    /// Another S3 service standing in for AWS (see [`Probe::with_aws_service`]).
    aws_service: Option<String>,
    state: Mutex<State>,
    /// BSLs to check now: granted a turn, or on an endpoint that answers again.
    wakeups: Arc<Wakeups>,
    /// BSLs to check now whatever their schedule (their endpoint answers again).
    forced: Mutex<HashSet<String>>,
}

#[derive(Default)]
struct State {
    endpoints: HashMap<String, Arc<Endpoint>>,
    /// Which endpoint each BSL's checks went to last (by "namespace/name").
    homes: HashMap<String, String>,
    /// Per TLS settings, the one configuration all stores share, so that a connection made for
    /// one location is reused for another with the same settings.
    tls: HashMap<Tls, Arc<rustls::ClientConfig>>,
    stores: HashMap<StoreKey, CachedStore>,
    /// Buckets' regions, as looked up.
    regions: HashMap<String, String>,
    /// A logical clock for least-recently-used eviction of `stores`.
    tick: u64,
}

struct CachedStore {
    store: Arc<dyn ObjectStore>,
    /// Keeps the endpoint counted as in use while a cached store sends through its lanes.
    _endpoint: Arc<Endpoint>,
    used: u64,
}

/// Everything a built store depends on, so that a cached store is reused only where it is the
/// same store.
#[derive(Clone, PartialEq, Eq, Hash)]
struct StoreKey {
    bucket: String,
    store: StoreConfig,
    tls: Tls,
}

/// Where a BSL's check stands at its endpoint.
pub enum Slot {
    Turn(Turn),
    /// The endpoint is down: the BSL's verdict, without a check.
    Verdict(Outcome),
    /// A provider with no endpoint bsl-sentinel checks, or a spec with nothing to check.
    NoEndpoint,
}

impl Probe {
    /// per_endpoint: max concurrent checks of, and max sockets open to, one storage endpoint;
    /// timeout: per check, counted from when the check gets one of its endpoint's turns.
    pub fn new(per_endpoint: usize, timeout: Duration) -> Probe {
        Probe {
            per_endpoint: per_endpoint.max(1),
            timeout,
            proxies: Arc::default(),
            aws_service: None,
            state: Mutex::new(State::default()),
            wakeups: Arc::default(),
            forced: Mutex::default(),
        }
    }

    /// Sends the checks through these proxies (by default, none).
    pub fn with_proxies(self, proxies: Proxies) -> Probe {
        Probe {
            proxies: Arc::new(proxies),
            ..self
        }
    }

    /// Sends aws BSLs with neither config.region nor config.s3Url to this S3 service instead
    /// of AWS: the bucket's region is looked up there, and the listing goes there (path style)
    /// with that region. For another partition's endpoint, or a test server.
    pub fn with_aws_service(self, url: &str) -> Probe {
        Probe {
            aws_service: Some(url.trim_end_matches('/').to_string()),
            ..self
        }
    }

    /// One check, with its own turn at its endpoint (for callers without a schedule).
    /// credential: the bytes of the Secret key spec.credential names (None if unset);
    /// ca_from_ref: the bytes of the Secret key spec.objectStorage.caCertRef names (None if
    /// unset).
    pub async fn check(
        &self,
        spec: &BackupStorageLocationSpec,
        credential: Option<&[u8]>,
        ca_from_ref: Option<&[u8]>,
    ) -> Outcome {
        let slot = match self.endpoint_key(spec) {
            None => Slot::NoEndpoint,
            Some(key) => match self.endpoint_of(&key).wait().await {
                Ok(turn) => Slot::Turn(turn),
                Err(message) => Slot::Verdict(unavailable(FailureReason::Timeout, &message)),
            },
        };
        self.check_in(slot, spec, credential, ca_from_ref, Duration::ZERO)
            .await
    }

    /// The BSL's slot at the endpoint its checks go to, without waiting: a turn or the
    /// endpoint's verdict; None when the BSL is in line there, to be woken through
    /// [`Probe::wakeups`] when its turn comes. `id` ("namespace/name") counts the BSL among
    /// the endpoint's.
    pub fn place(&self, id: &str, spec: &BackupStorageLocationSpec) -> Option<Slot> {
        let Some(key) = self.endpoint_key(spec) else {
            return Some(Slot::NoEndpoint);
        };
        let endpoint = self.endpoint_of(&key);
        {
            let mut state = self.state();
            let previous = state.homes.insert(id.to_string(), key.clone());
            if let Some(old) = previous.filter(|old| *old != key)
                && let Some(old) = state.endpoints.get(&old)
            {
                old.leave(id);
            }
        }
        endpoint.join(id);
        match endpoint.place(id) {
            Place::Turn(turn) => Some(Slot::Turn(turn)),
            Place::InLine => None,
            Place::Down(message) => {
                Some(Slot::Verdict(unavailable(FailureReason::Timeout, &message)))
            }
        }
    }

    /// The BSL will not be checked now (it is not due): a turn granted to it goes on.
    pub fn decline(&self, id: &str) {
        let endpoint = {
            let state = self.state();
            state
                .homes
                .get(id)
                .and_then(|key| state.endpoints.get(key))
                .cloned()
        };
        if let Some(endpoint) = endpoint {
            endpoint.decline(id);
        }
    }

    /// The check of a BSL in its slot; `period` is how often it is checked (0: once), which is
    /// how often its endpoint is probed should it not answer.
    pub async fn check_in(
        &self,
        slot: Slot,
        spec: &BackupStorageLocationSpec,
        credential: Option<&[u8]>,
        ca_from_ref: Option<&[u8]>,
        period: Duration,
    ) -> Outcome {
        let turn = match slot {
            Slot::Verdict(verdict) => return verdict,
            Slot::Turn(turn) => Some(turn),
            Slot::NoEndpoint => None,
        };
        let progress = Arc::new(Progress::default());
        let checked = tokio::time::timeout(
            self.timeout,
            progress.track(self.check_now(spec, credential, ca_from_ref)),
        )
        .await;
        let outcome = checked.unwrap_or_else(|_| {
            let step = progress.step().map(|s| format!(" {s}")).unwrap_or_default();
            let message = format!(
                "timed out after {}{step}, {}",
                GoDuration::from_std(self.timeout),
                describe_location(spec)
            );
            unavailable(FailureReason::Timeout, &sanitize(&message, &[]))
        });
        if let Some(turn) = turn {
            let contact = match &outcome {
                Outcome::Unavailable {
                    reason: FailureReason::Timeout,
                    ..
                } => Contact::Silent,
                Outcome::Unavailable {
                    reason: FailureReason::Config,
                    ..
                }
                | Outcome::Unchecked { .. } => Contact::None,
                _ => Contact::Answered,
            };
            let cause = match &outcome {
                Outcome::Unavailable { message, .. } => message.as_str(),
                _ => "",
            };
            let again = turn.report(contact, cause, period);
            if !again.is_empty() {
                tracing::info!(
                    endpoint = %self.endpoint_key(spec).unwrap_or_default(),
                    bsls = again.len(),
                    "the storage endpoint answers again: checking its BSLs"
                );
                lock(&self.forced).extend(again.iter().cloned());
                self.wakeups.add(again);
            }
        }
        outcome
    }

    /// BSLs ("namespace/name") to check now; waits for some.
    pub async fn wakeups(&self) -> Vec<String> {
        self.wakeups.next().await
    }

    /// Whether the BSL is to be checked now whatever its schedule; true once.
    pub fn take_recheck(&self, id: &str) -> bool {
        lock(&self.forced).remove(id)
    }

    /// Forgets a BSL that is gone.
    pub fn forget(&self, id: &str) {
        let mut state = self.state();
        if let Some(key) = state.homes.remove(id)
            && let Some(endpoint) = state.endpoints.get(&key)
        {
            endpoint.leave(id);
        }
        lock(&self.forced).remove(id);
    }

    /// Region lookup (where needed) and the listing, with no deadline of their own.
    async fn check_now(
        &self,
        spec: &BackupStorageLocationSpec,
        credential: Option<&[u8]>,
        ca_from_ref: Option<&[u8]>,
    ) -> Outcome {
        let Some(bucket) = region_unknown(spec) else {
            return self.check_in_region(spec, credential, ca_from_ref).await;
        };
        let region = match self.bucket_region(bucket).await {
            Ok(region) => region,
            Err(outcome) => return outcome,
        };
        let mut spec = spec.clone();
        let config = spec.config.get_or_insert_default();
        config.insert("region".into(), region);
        if let Some(url) = &self.aws_service {
            config.insert("s3Url".into(), url.clone());
            config.insert("s3ForcePathStyle".into(), "true".into());
        }
        let outcome = self.check_in_region(&spec, credential, ca_from_ref).await;
        if outcome != Outcome::Available {
            // A bucket made again elsewhere has another region: look it up afresh next time.
            self.state().regions.remove(bucket);
        }
        outcome
    }

    /// The bucket's region as Velero's aws plugin finds it for a BSL that names neither region
    /// nor s3Url: an unsigned HEAD of the bucket, whose answer (even a refusal) carries
    /// x-amz-bucket-region. Remembered per bucket.
    pub async fn bucket_region(&self, bucket: &str) -> Result<String, Outcome> {
        if let Some(region) = self.state().regions.get(bucket) {
            return Ok(region.clone());
        }
        let service = self.aws_lookup_service();
        let url = match &self.aws_service {
            Some(service) => format!("{service}/{bucket}"),
            None if virtual_hostable(bucket, "https") => {
                format!("https://{bucket}.s3.amazonaws.com")
            }
            None => format!("{AWS_GLOBAL}/{bucket}"),
        };
        let what = format!("looking up the region of bucket {bucket:?} at {service}");
        let failed = |reason, detail: String| unavailable(reason, &sanitize(&detail, &[]));
        let request = hyper::Request::head(&url)
            .body(HttpRequestBody::empty())
            .map_err(|e| failed(FailureReason::Config, format!("{what}: {e}")))?;
        let endpoint = self.endpoint_of(&parse_endpoint_url("s3Url", service).0);
        let tls = tls_config(&mut self.state(), &Tls::default())
            .map_err(|m| failed(FailureReason::Config, m))?;
        let client = connections::Client::new(endpoint.lanes.clone(), tls, self.proxies.clone());
        let response = match client.call(request).await {
            Err(e) => {
                let reason = classify(Some(e.kind()), None, None);
                return Err(failed(reason, format!("{what}: {}", root_cause(&e))));
            }
            Ok(response) => response,
        };
        let region = response
            .headers()
            .get("x-amz-bucket-region")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        let region = match (region, response.status().as_u16()) {
            (Some(region), _) => region,
            (None, 404) => {
                let message = format!("bucket {bucket:?} does not exist at {service} (HTTP 404)");
                return Err(failed(FailureReason::NotFound, message));
            }
            // No answer to go by: AWS's default region, and the listing tells the rest.
            (None, _) => return Ok(AWS_DEFAULT_REGION.into()),
        };
        let mut state = self.state();
        if state.regions.len() >= MAX_STORES {
            state.regions.clear();
        }
        state.regions.insert(bucket.to_string(), region.clone());
        Ok(region)
    }

    /// Where the region of a bucket is looked up.
    fn aws_lookup_service(&self) -> &str {
        self.aws_service.as_deref().unwrap_or(AWS_GLOBAL)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    async fn check_in_region(
        &self,
        spec: &BackupStorageLocationSpec,
        credential: Option<&[u8]>,
        ca_from_ref: Option<&[u8]>,
    ) -> Outcome {
        let plan = match plan(spec, credential, ca_from_ref) {
            Ok(plan) => plan,
            Err(Refusal::Invalid(message)) => {
                return Outcome::Unavailable {
                    reason: FailureReason::Config,
                    message: sanitize(&message, &[]),
                };
            }
            Err(Refusal::Unsupported(message)) => {
                return Outcome::Unchecked {
                    message: sanitize(&message, &[]),
                };
            }
        };
        let secrets = plan.store.secrets();
        let endpoint = self.endpoint_of(&plan.endpoint);
        match self.list(&plan, &endpoint).await {
            Err((reason, message)) => unavailable(reason, &sanitize(&message, &secrets)),
            Ok(dirs) => match check_layout(&dirs) {
                Ok(()) => Outcome::Available,
                Err(message) => unavailable(FailureReason::Layout, &sanitize(&message, &secrets)),
            },
        }
    }

    /// The endpoint a spec's checks take their turn at, e.g. "http://127.0.0.1:8333": the
    /// origin of the configured URL, the provider's default service, or for an aws bucket
    /// whose region is looked up, where it is looked up. None for a provider bsl-sentinel does
    /// not check.
    pub fn endpoint_key(&self, spec: &BackupStorageLocationSpec) -> Option<String> {
        if region_unknown(spec).is_some() {
            return Some(parse_endpoint_url("s3Url", self.aws_lookup_service()).0);
        }
        let config = spec.config.clone().unwrap_or_default();
        let bucket = spec.object_storage.bucket.trim_matches('/');
        match rules::known_provider(&spec.provider)? {
            Provider::Aws => Some(aws_endpoint(&config, bucket).key),
            Provider::Gcp => Some(gcp_endpoint(&config).key),
            Provider::Azure => Some(azure_endpoint(&config).key),
        }
    }

    fn endpoint_of(&self, key: &str) -> Arc<Endpoint> {
        let mut state = self.state();
        if let Some(endpoint) = state.endpoints.get(key) {
            return endpoint.clone();
        }
        if state.endpoints.len() >= MAX_ENDPOINTS {
            // One in use (a check in flight, a cached store) must stay, or two sets of lanes to
            // one endpoint would break the bound; so must one with BSLs in its line.
            state
                .endpoints
                .retain(|_, e| Arc::strong_count(e) > 1 || e.has_line());
        }
        let endpoint = Endpoint::new(key, self.per_endpoint, self.wakeups.clone());
        state.endpoints.insert(key.to_string(), endpoint.clone());
        endpoint
    }

    /// The one listing Velero makes: common prefixes under `prefix/` with delimiter "/".
    async fn list(
        &self,
        plan: &Plan,
        endpoint: &Arc<Endpoint>,
    ) -> Result<Vec<String>, (FailureReason, String)> {
        let store = self.store(plan, endpoint)?;
        let prefix = plan.prefix.as_deref().map(Path::from);
        let listing = store
            .list_with_delimiter(prefix.as_ref())
            .await
            .map_err(|e| describe_failure(plan, &e))?;
        Ok(listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect())
    }

    fn store(
        &self,
        plan: &Plan,
        endpoint: &Arc<Endpoint>,
    ) -> Result<Arc<dyn ObjectStore>, (FailureReason, String)> {
        let key = StoreKey {
            bucket: plan.bucket.clone(),
            store: plan.store.clone(),
            tls: plan.tls.clone(),
        };
        let tls = {
            let mut state = self.state();
            state.tick += 1;
            let tick = state.tick;
            if let Some(cached) = state.stores.get_mut(&key) {
                cached.used = tick;
                return Ok(cached.store.clone());
            }
            tls_config(&mut state, &plan.tls).map_err(|m| (FailureReason::Config, m))?
        };
        // Built outside the lock: building may read files (the default credential chains).
        let client = connections::Client::new(endpoint.lanes.clone(), tls, self.proxies.clone());
        let store = build_store(plan, client, self.timeout)
            .map_err(|e| (FailureReason::Config, error_chain(&e)))?;
        let mut state = self.state();
        if state.stores.len() >= MAX_STORES
            && let Some(oldest) = state
                .stores
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
        {
            state.stores.remove(&oldest);
        }
        let used = state.tick;
        state.stores.insert(
            key,
            CachedStore {
                store: store.clone(),
                _endpoint: endpoint.clone(),
                used,
            },
        );
        Ok(store)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// "listing s3://bucket/prefix/", as a timed-out check names what it was doing.
fn describe_location(spec: &BackupStorageLocationSpec) -> String {
    let provider = rules::known_provider(&spec.provider);
    let bucket = spec.object_storage.bucket.trim_matches('/');
    format!(
        "listing {}",
        location(provider, bucket, spec.object_storage.prefix.as_deref())
    )
}

/// `s3://bucket/prefix/`, as users know a location.
fn location(provider: Option<Provider>, bucket: &str, prefix: Option<&str>) -> String {
    let scheme = match provider {
        Some(Provider::Gcp) => "gs",
        Some(Provider::Azure) => "azure",
        Some(Provider::Aws) | None => "s3",
    };
    match prefix
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty())
    {
        Some(prefix) => format!("{scheme}://{bucket}/{prefix}/"),
        None => format!("{scheme}://{bucket}/"),
    }
}

/// The shared TLS configuration for a location's settings.
fn tls_config(state: &mut State, tls: &Tls) -> Result<Arc<rustls::ClientConfig>, String> {
    if let Some(config) = state.tls.get(tls) {
        return Ok(config.clone());
    }
    if state.tls.len() >= MAX_ENDPOINTS {
        state.tls.retain(|_, c| Arc::strong_count(c) > 1);
    }
    let config = connections::tls_config(tls.ca.as_deref(), tls.insecure)?;
    state.tls.insert(tls.clone(), config.clone());
    Ok(config)
}

fn unavailable(reason: FailureReason, message: &str) -> Outcome {
    Outcome::Unavailable {
        reason,
        message: message.to_string(),
    }
}

/// Hands every store built for one endpoint a client on that endpoint's lanes.
#[derive(Debug)]
struct Connector(connections::Client);

impl HttpConnector for Connector {
    fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(self.0.clone()))
    }
}

fn build_store(
    plan: &Plan,
    client: connections::Client,
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
    let connector = Connector(client);
    let bucket = plan.bucket.as_str();
    Ok(match &plan.store {
        StoreConfig::Aws {
            region,
            url,
            virtual_hosted,
            keys,
        } => {
            let builder = match keys {
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
            Arc::new(
                builder
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_endpoint(url)
                    .with_virtual_hosted_style_request(*virtual_hosted)
                    .with_allow_http(true)
                    .with_retry(retry)
                    .with_http_connector(connector)
                    .build()?,
            )
        }
        StoreConfig::Gcp {
            base_url,
            service_account,
        } => {
            let builder = match service_account {
                Some(key) => GoogleCloudStorageBuilder::new().with_service_account_key(&key.0),
                None => GoogleCloudStorageBuilder::from_env(),
            };
            Arc::new(
                builder
                    .with_bucket_name(bucket)
                    .with_base_url(base_url)
                    .with_retry(retry)
                    .with_http_connector(connector)
                    .build()?,
            )
        }
        StoreConfig::Azure { account, url, auth } => {
            let builder = match auth {
                Some(AzureAuth::Key(key)) => MicrosoftAzureBuilder::new().with_access_key(&key.0),
                Some(AzureAuth::Sas(token)) => {
                    MicrosoftAzureBuilder::new().with_config(AzureConfigKey::SasKey, &token.0)
                }
                Some(AzureAuth::ClientSecret {
                    client_id,
                    secret,
                    tenant_id,
                }) => MicrosoftAzureBuilder::new()
                    .with_client_secret_authorization(client_id, &secret.0, tenant_id),
                None => MicrosoftAzureBuilder::from_env(),
            };
            Arc::new(
                builder
                    .with_account(account)
                    .with_container_name(bucket)
                    .with_endpoint(url.clone())
                    .with_allow_http(true)
                    .with_retry(retry)
                    .with_http_connector(connector)
                    .build()?,
            )
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Pure core: the plan of a check.

/// What one check does, derived from the spec and the Secrets without I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Plan {
    provider: Provider,
    /// The semaphore key; see [`Probe::endpoint`].
    endpoint: String,
    tls: Tls,
    bucket: String,
    /// Without slashes at the ends; None for the bucket's root.
    prefix: Option<String>,
    store: StoreConfig,
}

impl Plan {
    /// `s3://bucket/prefix/`, as users know the location.
    fn location(&self) -> String {
        location(Some(self.provider), &self.bucket, self.prefix.as_deref())
    }

    /// "bucket" or, on Azure, "container".
    fn container_word(&self) -> &'static str {
        match self.provider {
            Provider::Azure => "container",
            Provider::Aws | Provider::Gcp => "bucket",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Tls {
    /// aws insecureSkipTLSVerify.
    insecure: bool,
    /// caCertRef's bytes, else caCert's: added to the trusted roots.
    ca: Option<Vec<u8>>,
}

/// A credential value: compared and hashed, never printed.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(REDACTED)")
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum StoreConfig {
    Aws {
        region: String,
        /// The URL object_store sends requests to (with the bucket in the host if
        /// `virtual_hosted`).
        url: String,
        virtual_hosted: bool,
        /// None: object_store's default credential chain.
        keys: Option<AwsKeys>,
    },
    Gcp {
        base_url: String,
        /// The service-account JSON; None: the default credential chain.
        service_account: Option<Secret>,
    },
    Azure {
        account: String,
        url: String,
        /// None: the default credential chain.
        auth: Option<AzureAuth>,
    },
}

impl StoreConfig {
    /// The values no message may show.
    fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            StoreConfig::Aws { keys: Some(k), .. } => {
                out.push(k.secret_access_key.0.clone());
                out.extend(k.session_token.iter().map(|t| t.0.clone()));
            }
            StoreConfig::Gcp {
                service_account: Some(key),
                ..
            } => out.push(key.0.clone()),
            StoreConfig::Azure { auth: Some(a), .. } => match a {
                AzureAuth::Key(k) | AzureAuth::Sas(k) => out.push(k.0.clone()),
                AzureAuth::ClientSecret { secret, .. } => out.push(secret.0.clone()),
            },
            _ => {}
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct AwsKeys {
    access_key_id: String,
    secret_access_key: Secret,
    session_token: Option<Secret>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum AzureAuth {
    Key(Secret),
    Sas(Secret),
    ClientSecret {
        client_id: String,
        secret: Secret,
        tenant_id: String,
    },
}

/// Why a check is not made.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// The spec or its credentials cannot work: Unavailable(Config).
    Invalid(String),
    /// bsl-sentinel cannot tell: Unchecked.
    Unsupported(String),
}

type Config = BTreeMap<String, String>;

fn plan(
    spec: &BackupStorageLocationSpec,
    credential: Option<&[u8]>,
    ca_from_ref: Option<&[u8]>,
) -> Result<Plan, Refusal> {
    let Some(provider) = rules::known_provider(&spec.provider) else {
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
    if provider == Provider::Aws && rules::is_mrap_arn(&bucket) {
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
    let mut tls = Tls {
        insecure: false,
        ca: ca_from_ref
            .map(<[u8]>::to_vec)
            .or_else(|| spec.object_storage.ca_cert.as_ref().map(|c| c.0.clone())),
    };
    let (endpoint, store) = match provider {
        Provider::Aws => {
            tls.insecure = config_bool(&config, "insecureSkipTLSVerify")?;
            plan_aws(&config, &bucket, credential)?
        }
        Provider::Gcp => plan_gcp(&config, credential)?,
        Provider::Azure => plan_azure(&config, credential)?,
    };
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
fn region_unknown(spec: &BackupStorageLocationSpec) -> Option<&str> {
    if rules::known_provider(&spec.provider) != Some(Provider::Aws) {
        return None;
    }
    if let Some(config) = &spec.config
        && (config_value(config, "region").is_some() || config_value(config, "s3Url").is_some())
    {
        return None;
    }
    let bucket = spec.object_storage.bucket.trim_matches('/');
    // The plan reports an empty bucket, one with a slash, or an access point.
    (!bucket.is_empty() && !bucket.contains('/')).then_some(bucket)
}

fn config_value<'a>(config: &'a Config, key: &str) -> Option<&'a str> {
    config.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// A boolean config key, parsed as Go's strconv.ParseBool (the plugins' parser); unset is false.
fn config_bool(config: &Config, key: &str) -> Result<bool, Refusal> {
    match config_value(config, key) {
        None => Ok(false),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
        Some(other) => Err(Refusal::Invalid(format!(
            "config.{key} is not a boolean: {other:?}"
        ))),
    }
}

/// Where the requests of a spec go.
struct Target {
    /// The semaphore key: the origin of the service.
    key: String,
    /// The URL given to object_store.
    url: Result<String, String>,
    virtual_hosted: bool,
}

/// The endpoint of a URL config value: its origin, or the value itself when it does not parse
/// (the plan reports that).
fn parse_endpoint_url(key: &str, value: &str) -> (String, Result<Url, String>) {
    match Url::parse(value) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            (url.origin().ascii_serialization(), Ok(url))
        }
        _ => (
            value.to_string(),
            Err(format!(
                "config.{key} must be an http:// or https:// URL, not {value:?}"
            )),
        ),
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

fn aws_endpoint(config: &Config, bucket: &str) -> Target {
    let path_style = matches!(
        config_value(config, "s3ForcePathStyle"),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True")
    );
    let region = config_value(config, "region").unwrap_or(AWS_DEFAULT_REGION);
    let Some(s3_url) = config_value(config, "s3Url") else {
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

fn plan_aws(
    config: &Config,
    bucket: &str,
    credential: Option<&str>,
) -> Result<(String, StoreConfig), Refusal> {
    config_bool(config, "s3ForcePathStyle")?;
    let endpoint = aws_endpoint(config, bucket);
    let url = endpoint.url.map_err(Refusal::Invalid)?;
    let keys = match credential {
        Some(file) => {
            let profile = config_value(config, "profile").unwrap_or("default");
            Some(aws_profile(file, profile)?)
        }
        None => None,
    };
    Ok((
        endpoint.key,
        StoreConfig::Aws {
            region: config_value(config, "region")
                .unwrap_or(AWS_DEFAULT_REGION)
                .to_string(),
            url,
            virtual_hosted: endpoint.virtual_hosted,
            keys,
        },
    ))
}

/// Profile settings under which the AWS SDK gets credentials without static keys.
const AWS_INDIRECT: [&str; 7] = [
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
fn aws_profile(file: &str, profile: &str) -> Result<AwsKeys, Refusal> {
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
        (Some(access_key_id), Some(secret)) => Ok(AwsKeys {
            access_key_id,
            secret_access_key: Secret(secret),
            session_token: get("aws_session_token").map(Secret),
        }),
        (id, _) => {
            if let Some(setting) = AWS_INDIRECT.iter().find(|k| values.contains_key(**k)) {
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

const GCS_DEFAULT: &str = "https://storage.googleapis.com";

fn gcp_endpoint(config: &Config) -> Target {
    let Some(value) = config_value(config, "storeEndpoint") else {
        return Target {
            key: GCS_DEFAULT.to_string(),
            url: Ok(GCS_DEFAULT.to_string()),
            virtual_hosted: false,
        };
    };
    let (key, parsed) = parse_endpoint_url("storeEndpoint", value);
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

fn plan_gcp(config: &Config, credential: Option<&str>) -> Result<(String, StoreConfig), Refusal> {
    let endpoint = gcp_endpoint(config);
    let base_url = endpoint.url.map_err(Refusal::Invalid)?;
    let service_account = match credential {
        Some(json) => {
            let value: serde_json::Value = serde_json::from_str(json)
                .map_err(|e| Refusal::Invalid(format!("the credentials file is not JSON: {e}")))?;
            match value.get("type").and_then(|t| t.as_str()) {
                None | Some("service_account") => Some(Secret(json.to_string())),
                Some(other) => {
                    return Err(Refusal::Unsupported(format!(
                        "bsl-sentinel cannot use Google credentials of type {other:?}; the \
                         phase is left to Velero"
                    )));
                }
            }
        }
        None => None,
    };
    Ok((
        endpoint.key,
        StoreConfig::Gcp {
            base_url,
            service_account,
        },
    ))
}

fn azure_endpoint(config: &Config) -> Target {
    let uri = config_value(config, "storageAccountURI")
        .map(|v| ("storageAccountURI", v))
        .or_else(|| {
            config_value(config, "storageAccountBlobEndpoint")
                .map(|v| ("storageAccountBlobEndpoint", v))
        });
    match uri {
        Some((key, value)) => {
            let (origin, parsed) = parse_endpoint_url(key, value);
            Target {
                key: origin,
                url: parsed.map(|u| u.as_str().trim_end_matches('/').to_string()),
                virtual_hosted: false,
            }
        }
        None => {
            let account = config_value(config, "storageAccount").unwrap_or_default();
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
fn azure_account(config: &Config, url: &str) -> Option<String> {
    if let Some(account) = config_value(config, "storageAccount") {
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

fn plan_azure(config: &Config, credential: Option<&str>) -> Result<(String, StoreConfig), Refusal> {
    let endpoint = azure_endpoint(config);
    let url = endpoint.url.map_err(Refusal::Invalid)?;
    let account = azure_account(config, &url).ok_or_else(|| {
        Refusal::Invalid("config.storageAccount is required to sign requests".into())
    })?;
    let auth = match credential {
        Some(file) => Some(azure_auth(config, &env_lines(file))?),
        None => None,
    };
    Ok((endpoint.key, StoreConfig::Azure { account, url, auth }))
}

/// How the azure plugin authenticates from its credentials file: the account key, else a SAS
/// token, else an Azure AD client secret.
fn azure_auth(config: &Config, vars: &HashMap<String, String>) -> Result<AzureAuth, Refusal> {
    let key_var = config_value(config, "storageAccountKeyEnvVar");
    let sas_var = config_value(config, "storageAccountSASTokenEnvVar");
    let get = |name: &str| vars.get(name).filter(|v| !v.is_empty()).cloned();
    if let Some(key) = get(key_var.unwrap_or("AZURE_STORAGE_ACCOUNT_ACCESS_KEY")) {
        return Ok(AzureAuth::Key(Secret(key)));
    }
    if let Some(name) = key_var {
        return Err(Refusal::Invalid(format!(
            "the credentials file has no {name} (named by config.storageAccountKeyEnvVar)"
        )));
    }
    if let Some(name) = sas_var {
        return match get(name) {
            Some(token) => Ok(AzureAuth::Sas(Secret(
                token.trim_start_matches('?').to_string(),
            ))),
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
        (Some(client_id), Some(secret), Some(tenant_id)) => Ok(AzureAuth::ClientSecret {
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

// ---------------------------------------------------------------------------------------------
// Pure core: judging the listing and the failures.

/// The top-level directories Velero writes (pkg/persistence/object_store.go).
const VALID_DIRS: [&str; 6] = [
    "backups", "restores", "restic", "metadata", "plugins", "kopia",
];

/// Velero's layout rule: every top-level directory is one Velero writes. The error is Velero's
/// own message, word for word.
fn check_layout<S: AsRef<str>>(dirs: &[S]) -> Result<(), String> {
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

/// The kind of failure a listing error is.
fn classify(
    transport: Option<HttpErrorKind>,
    status: Option<u16>,
    code: Option<&str>,
) -> FailureReason {
    match transport {
        Some(HttpErrorKind::Connect) => return FailureReason::Unreachable,
        Some(HttpErrorKind::Timeout) => return FailureReason::Timeout,
        _ => {}
    }
    const AUTH_CODES: [&str; 7] = [
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AuthorizationFailure",
        "AuthenticationFailed",
        "AccessDenied",
        "InvalidToken",
        "ExpiredToken",
    ];
    const NOT_FOUND_CODES: [&str; 3] = ["NoSuchBucket", "ContainerNotFound", "notFound"];
    if code.is_some_and(|c| AUTH_CODES.contains(&c)) || matches!(status, Some(401 | 403)) {
        FailureReason::Auth
    } else if code.is_some_and(|c| NOT_FOUND_CODES.contains(&c)) || status == Some(404) {
        FailureReason::NotFound
    } else {
        FailureReason::Other
    }
}

/// The HTTP status in object_store's error text ("... status code: 403 Forbidden: ...").
fn status_in(text: &str) -> Option<u16> {
    let rest = &text[text.find("status code: ")? + "status code: ".len()..];
    rest.get(..3)?.parse().ok()
}

/// The text of an XML element in an error body, e.g. `<Code>NoSuchBucket</Code>`.
fn xml_element<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find('<')?;
    Some(text[start..start + len].trim()).filter(|s| !s.is_empty())
}

/// Every message in an error's source chain, joined as anyhow prints them, without repeats.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(err);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// The innermost cause of an error, e.g. "Connection refused (os error 111)".
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

/// Reason and message for a failed listing.
fn describe_failure(plan: &Plan, err: &object_store::Error) -> (FailureReason, String) {
    let mut transport = None;
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(http) = e.downcast_ref::<HttpError>() {
            transport = Some(http.kind());
            break;
        }
        current = e.source();
    }
    let text = error_chain(err);
    let status = status_in(&text);
    // fake and real servers alike put the bare status in <Code> at times; that says nothing new.
    let code = xml_element(&text, "Code").filter(|c| !c.bytes().all(|b| b.is_ascii_digit()));
    let reason = classify(transport, status, code);
    let endpoint = &plan.endpoint;
    let what = plan.container_word();
    let bucket = &plan.bucket;
    let detail = match (status, code) {
        (Some(s), Some(c)) => format!("HTTP {s}, {c}"),
        (Some(s), None) => format!("HTTP {s}"),
        (None, Some(c)) => c.to_string(),
        (None, None) => String::new(),
    };
    let message = match reason {
        FailureReason::Unreachable => format!("cannot connect to {endpoint}: {}", root_cause(err)),
        FailureReason::Timeout => format!("timed out talking to {endpoint}: {}", root_cause(err)),
        FailureReason::Auth => format!(
            "authentication failed: {endpoint} rejected the credentials for {what} {bucket:?} \
             ({detail})"
        ),
        FailureReason::NotFound => {
            format!("{what} {bucket:?} does not exist at {endpoint} ({detail})")
        }
        _ if status.is_some() => {
            let said = xml_element(&text, "Message")
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            format!(
                "listing {} at {endpoint} failed ({detail}){said}",
                plan.location()
            )
        }
        _ => format!("listing {} at {endpoint} failed: {text}", plan.location()),
    };
    (reason, message)
}

/// Azure SAS query parameters that grant access (Velero redacts the same).
const SAS_PARAMS: [&str; 10] = [
    "sig", "se", "st", "sp", "spr", "sv", "sr", "sip", "srt", "ss",
];

/// A message fit for a BSL's status: known secrets and SAS parameters redacted, only the first
/// line, no response body, whitespace collapsed, at most [`MAX_MESSAGE`] characters.
pub fn sanitize(message: &str, secrets: &[String]) -> String {
    let mut text = message.lines().next().unwrap_or_default().to_string();
    redact(&mut text, secrets);
    // A response body (XML, HTML or JSON) starts with '<' or '{"'; what precedes it says enough.
    if let Some(at) = [text.find('<'), text.find("{\"")]
        .into_iter()
        .flatten()
        .min()
    {
        text.truncate(at);
    }
    let text = redact_sas(&text);
    let mut out = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches([':', ' ', '-'])
        .to_string();
    // Collapsing whitespace can join the pieces of a secret: redact what it made, too.
    redact(&mut out, secrets);
    if out.chars().count() > MAX_MESSAGE {
        out = out.chars().take(MAX_MESSAGE - 3).collect::<String>() + "...";
    }
    out
}

fn redact(text: &mut String, secrets: &[String]) {
    for secret in secrets {
        // Short values would redact ordinary words; real secrets are long.
        if secret.len() >= 8 {
            *text = text.replace(secret.as_str(), "REDACTED");
            let collapsed = secret.split_whitespace().collect::<Vec<_>>().join(" ");
            if collapsed.len() >= 8 && collapsed != *secret {
                *text = text.replace(&collapsed, "REDACTED");
            }
        }
    }
}

/// Replaces the value of every SAS parameter in query strings (`?sig=...&se=...`).
fn redact_sas(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['?', '&']) {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let name_len = rest
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        let name = &rest[..name_len];
        if rest[name_len..].starts_with('=')
            && SAS_PARAMS.contains(&name.to_ascii_lowercase().as_str())
        {
            let value_len = rest[name_len + 1..]
                .find(|c: char| c == '&' || c == '#' || c.is_whitespace() || c == '"' || c == '\'')
                .unwrap_or(rest.len() - name_len - 1);
            out.push_str(name);
            out.push_str("=REDACTED");
            rest = &rest[name_len + 1 + value_len..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bsl::ObjectStorageLocation;

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

    const AWS_FILE: &str = "[default]\naws_access_key_id = AKID\naws_secret_access_key = s3cr3t-value\n\
        \n# other\n[profile backup]\naws_access_key_id=AKID2\naws_secret_access_key=other-secret\n\
        aws_session_token=tok-en-value\n[assume]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = default\n";

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
            Some("b1"),
            "a blank region is none"
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
        let StoreConfig::Aws {
            region,
            url,
            virtual_hosted,
            keys,
        } = p.store
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
        let StoreConfig::Aws {
            url,
            virtual_hosted,
            ..
        } = p.store
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
            StoreConfig::Aws {
                virtual_hosted: false,
                ..
            }
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
            StoreConfig::Aws { ref url, virtual_hosted: true, .. }
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
    fn aws_profiles() {
        let keys = aws_profile(AWS_FILE, "backup").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(keys.access_key_id, "AKID2");
        assert_eq!(keys.session_token, Some(Secret("tok-en-value".into())));
        assert_eq!(
            aws_profile(AWS_FILE, "nope"),
            Err(Refusal::Invalid(
                "the credentials file has no profile \"nope\" (config.profile picks the profile, \
                 default \"default\")"
                    .into()
            ))
        );
        assert!(matches!(
            aws_profile(AWS_FILE, "assume"),
            Err(Refusal::Unsupported(m)) if m.contains("role_arn")
        ));
        assert_eq!(
            aws_profile("[default]\naws_access_key_id=A\n", "default"),
            Err(Refusal::Invalid(
                "profile \"default\" of the credentials file has no aws_secret_access_key".into()
            ))
        );
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
            StoreConfig::Gcp { ref base_url, service_account: Some(_) } if base_url == "http://127.0.0.1:4443"
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
            StoreConfig::Azure {
                account: "devstoreaccount1".into(),
                url: "http://127.0.0.1:10000/devstoreaccount1".into(),
                auth: Some(AzureAuth::Key(Secret("a2V5".into()))),
            }
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
            StoreConfig::Azure { auth: Some(AzureAuth::Sas(Secret(ref t))), .. } if t == "sv=1&sig=abc"
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

    #[test]
    fn classifies_failures() {
        use FailureReason::*;
        assert_eq!(
            classify(Some(HttpErrorKind::Connect), None, None),
            Unreachable
        );
        assert_eq!(classify(Some(HttpErrorKind::Timeout), None, None), Timeout);
        assert_eq!(
            classify(None, Some(403), Some("SignatureDoesNotMatch")),
            Auth
        );
        assert_eq!(classify(None, Some(400), Some("InvalidAccessKeyId")), Auth);
        assert_eq!(
            classify(None, Some(403), Some("AuthorizationFailure")),
            Auth
        );
        assert_eq!(classify(None, Some(401), None), Auth);
        assert_eq!(classify(None, Some(404), Some("NoSuchBucket")), NotFound);
        assert_eq!(
            classify(None, Some(404), Some("ContainerNotFound")),
            NotFound
        );
        assert_eq!(classify(None, Some(500), Some("InternalError")), Other);
        assert_eq!(classify(None, None, None), Other);
    }

    #[test]
    fn finds_status_and_code() {
        let text = "Generic S3 error: Error performing GET http://h/b?list-type=2 in 2ms - Server \
            returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code>\
            <Message>The specified bucket does not exist</Message></Error>";
        assert_eq!(status_in(text), Some(404));
        assert_eq!(xml_element(text, "Code"), Some("NoSuchBucket"));
        assert_eq!(
            xml_element(text, "Message"),
            Some("The specified bucket does not exist")
        );
        assert_eq!(status_in("no status here"), None);
    }

    #[test]
    fn sanitize_redacts_sas_and_secrets() {
        let m = "GET https://a.blob.core.windows.net/c?restype=container&sv=2021&sig=abc%2Bdef&se=2030 \
                 failed with key s3cr3t-value";
        assert_eq!(
            sanitize(m, &["s3cr3t-value".to_string()]),
            "GET https://a.blob.core.windows.net/c?restype=container&sv=REDACTED&sig=REDACTED&se=REDACTED \
             failed with key REDACTED"
        );
        assert_eq!(redact_sas("?SIG=x&comp=list"), "?SIG=REDACTED&comp=list");
    }

    #[test]
    fn sanitize_strips_dumps_and_bounds() {
        let m = "status code: 403 Forbidden: <?xml version=\"1.0\"?><Error><Code>X</Code></Error>\nHTTP/1.1 403\nServer: s";
        assert_eq!(sanitize(m, &[]), "status code: 403 Forbidden");
        assert_eq!(
            sanitize("failed: {\"error\":{\"code\":500}}", &[]),
            "failed"
        );
        let long = "é".repeat(2000);
        let out = sanitize(&long, &[]);
        assert_eq!(out.chars().count(), MAX_MESSAGE);
        assert!(out.ends_with("..."));
        // A short "secret" does not blank out ordinary words.
        assert_eq!(sanitize("a bucket", &["a".to_string()]), "a bucket");
    }

    #[test]
    fn reasons_have_stable_names() {
        assert_eq!(FailureReason::NotFound.as_str(), "not_found");
        assert_eq!(FailureReason::Timeout.as_str(), "timeout");
    }
}
