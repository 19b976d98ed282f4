//! The storage probe: Velero's validity check of a BackupStorageLocation (IsValid in
//! pkg/persistence/object_store.go), made against the aws, gcp and azure object stores through
//! object_store.
//!
//! Pure core: planning a check from the spec and the Secrets' bytes and judging its listing
//! (`plan`), classifying failures and sanitizing messages (`failure`); what each provider's
//! endpoint, credentials and store are is [`crate::provider`]'s. Thin edge ([`Probe`]): shared
//! HTTP clients, a semaphore per endpoint, a cache of built stores and the one listing.
//!
//! Connections: a check holds one of its endpoint's `per_endpoint` permits while it runs, and
//! its requests go through that endpoint's `per_endpoint` lanes ([`connections`]), so a
//! thousand BSLs on one endpoint have at most `per_endpoint` sockets open to it, reused from
//! check to check.

pub mod connections;
pub mod endpoints;
mod failure;
mod plan;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lru::LruCache;
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody, HttpService};
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore};

pub use failure::{FailureReason, MAX_MESSAGE, sanitize};

use crate::bsl::BackupStorageLocationSpec;
use crate::duration::GoDuration;
use crate::provider::{Provider, Refusal, StoreConfig, aws, known_provider, parse_endpoint_url};
use crate::proxy::Proxies;
use connections::Progress;
use endpoints::{Contact, Endpoint, Place, Turn, Wakeups};
use failure::{classify, describe_failure, error_chain, root_cause};
use plan::{Plan, Tls, check_layout, location, plan, region_unknown};

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

/// Where and how one location is checked (see [`Probe::route`]).
#[derive(Debug)]
pub struct Route {
    plan: Plan,
}

impl Route {
    pub fn provider(&self) -> Provider {
        self.plan.provider
    }

    /// The endpoint key, e.g. "http://127.0.0.1:8333".
    pub fn endpoint(&self) -> &str {
        &self.plan.endpoint
    }

    /// The URL the listing is sent to (virtual-hosted buckets included).
    pub fn url(&self) -> &str {
        self.plan.store.url()
    }

    /// `s3://bucket/prefix/`.
    pub fn location(&self) -> String {
        self.plan.location()
    }

    /// aws insecureSkipTLSVerify.
    pub fn insecure(&self) -> bool {
        self.plan.tls.insecure
    }

    /// Whether caCert or caCertRef adds a CA to the trusted roots.
    pub fn has_ca(&self) -> bool {
        self.plan.tls.ca.is_some()
    }

    /// The values no message may show.
    pub fn secrets(&self) -> Vec<String> {
        self.plan.store.secrets()
    }
}

/// Built stores kept for reuse; beyond this the least recently used is dropped.
const MAX_STORES: NonZeroUsize = NonZeroUsize::new(1024).unwrap();
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

struct State {
    endpoints: HashMap<String, Arc<Endpoint>>,
    /// Which endpoint each BSL's checks went to last (by "namespace/name").
    homes: HashMap<String, String>,
    /// Per TLS settings, the one configuration all stores share, so that a connection made for
    /// one location is reused for another with the same settings.
    tls: HashMap<Tls, Arc<rustls::ClientConfig>>,
    stores: LruCache<StoreKey, CachedStore>,
    /// Buckets' regions, as looked up.
    regions: HashMap<String, String>,
}

impl Default for State {
    fn default() -> State {
        State {
            endpoints: HashMap::new(),
            homes: HashMap::new(),
            tls: HashMap::new(),
            stores: LruCache::new(MAX_STORES),
            regions: HashMap::new(),
        }
    }
}

struct CachedStore {
    store: Arc<dyn ObjectStore>,
    /// Keeps the endpoint counted as in use while a cached store sends through its lanes.
    _endpoint: Arc<Endpoint>,
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
        self.check_listing(spec, credential, ca_from_ref).await.0
    }

    /// [`Probe::check`], with the top-level directories the listing found (None when there
    /// was no listing), for `diagnose`.
    pub async fn check_listing(
        &self,
        spec: &BackupStorageLocationSpec,
        credential: Option<&[u8]>,
        ca_from_ref: Option<&[u8]>,
    ) -> (Outcome, Option<Vec<String>>) {
        let slot = match self.endpoint_key(spec) {
            None => Slot::NoEndpoint,
            Some(key) => match self.endpoint_of(&key).wait().await {
                Ok(turn) => Slot::Turn(turn),
                Err(message) => Slot::Verdict(unavailable(FailureReason::Timeout, &message)),
            },
        };
        self.check_in_listing(slot, spec, credential, ca_from_ref, Duration::ZERO)
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
        self.check_in_listing(slot, spec, credential, ca_from_ref, period)
            .await
            .0
    }

    async fn check_in_listing(
        &self,
        slot: Slot,
        spec: &BackupStorageLocationSpec,
        credential: Option<&[u8]>,
        ca_from_ref: Option<&[u8]>,
        period: Duration,
    ) -> (Outcome, Option<Vec<String>>) {
        let turn = match slot {
            Slot::Verdict(verdict) => return (verdict, None),
            Slot::Turn(turn) => Some(turn),
            Slot::NoEndpoint => None,
        };
        let progress = Arc::new(Progress::default());
        let checked = tokio::time::timeout(
            self.timeout,
            progress.track(self.check_now(spec, credential, ca_from_ref)),
        )
        .await;
        let (outcome, dirs) = checked.unwrap_or_else(|_| {
            let step = progress.step().map(|s| format!(" {s}")).unwrap_or_default();
            let message = format!(
                "timed out after {}{step}, {}",
                GoDuration::from_std(self.timeout),
                describe_location(spec)
            );
            let outcome = unavailable(FailureReason::Timeout, &sanitize(&message, &[]));
            (outcome, None)
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
        (outcome, dirs)
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
    ) -> (Outcome, Option<Vec<String>>) {
        let in_region = match self.in_region(spec).await {
            Ok(spec) => spec,
            Err(outcome) => return (outcome, None),
        };
        let checked = self
            .check_in_region(&in_region, credential, ca_from_ref)
            .await;
        if let (Cow::Owned(_), Some(bucket)) = (&in_region, region_unknown(spec))
            && checked.0 != Outcome::Available
        {
            // A bucket made again elsewhere has another region: look it up afresh next time.
            self.state().regions.remove(bucket);
        }
        checked
    }

    /// The spec as its check uses it: for an aws BSL that names neither region nor s3Url,
    /// with the bucket's region looked up (Velero's rule); otherwise as it is.
    pub async fn in_region<'a>(
        &self,
        spec: &'a BackupStorageLocationSpec,
    ) -> Result<Cow<'a, BackupStorageLocationSpec>, Outcome> {
        let Some(bucket) = region_unknown(spec) else {
            return Ok(Cow::Borrowed(spec));
        };
        let region = self.bucket_region(bucket).await?;
        let mut spec = spec.clone();
        let config = spec.config.get_or_insert_default();
        aws::set_region(config, region, self.aws_service.as_deref());
        Ok(Cow::Owned(spec))
    }

    /// The bucket's region as Velero's aws plugin finds it for a BSL that names neither region
    /// nor s3Url: an unsigned HEAD of the bucket, whose answer (even a refusal) carries
    /// x-amz-bucket-region. Remembered per bucket.
    pub async fn bucket_region(&self, bucket: &str) -> Result<String, Outcome> {
        if let Some(region) = self.state().regions.get(bucket) {
            return Ok(region.clone());
        }
        let service = self.aws_lookup_service();
        let url = aws::region_lookup_url(self.aws_service.as_deref(), bucket);
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
            (None, _) => return Ok(aws::DEFAULT_REGION.into()),
        };
        let mut state = self.state();
        if state.regions.len() >= MAX_STORES.get() {
            state.regions.clear();
        }
        state.regions.insert(bucket.to_string(), region.clone());
        Ok(region)
    }

    /// Where the region of a bucket is looked up.
    fn aws_lookup_service(&self) -> &str {
        self.aws_service.as_deref().unwrap_or(aws::GLOBAL)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    async fn check_in_region(
        &self,
        spec: &BackupStorageLocationSpec,
        credential: Option<&[u8]>,
        ca_from_ref: Option<&[u8]>,
    ) -> (Outcome, Option<Vec<String>>) {
        let route = match self.route(spec, credential, ca_from_ref) {
            Ok(route) => route,
            Err(outcome) => return (outcome, None),
        };
        let plan = &route.plan;
        let secrets = plan.store.secrets();
        let endpoint = self.endpoint_of(&plan.endpoint);
        match self.list(plan, &endpoint).await {
            Err((reason, message)) => (unavailable(reason, &sanitize(&message, &secrets)), None),
            Ok(dirs) => {
                let outcome = match check_layout(&dirs) {
                    Ok(()) => Outcome::Available,
                    Err(message) => {
                        unavailable(FailureReason::Layout, &sanitize(&message, &secrets))
                    }
                };
                (outcome, Some(dirs))
            }
        }
    }

    /// Where and how a spec (its region known, see [`Probe::in_region`]) is checked, from the
    /// spec and the Secrets' bytes, without I/O; Err is the check's verdict when the spec or
    /// its credentials cannot work.
    pub fn route(
        &self,
        spec: &BackupStorageLocationSpec,
        credential: Option<&[u8]>,
        ca_from_ref: Option<&[u8]>,
    ) -> Result<Route, Outcome> {
        match plan(spec, credential, ca_from_ref) {
            Ok(plan) => Ok(Route { plan }),
            Err(Refusal::Invalid(message)) => Err(Outcome::Unavailable {
                reason: FailureReason::Config,
                message: sanitize(&message, &[]),
            }),
            Err(Refusal::Unsupported(message)) => Err(Outcome::Unchecked {
                message: sanitize(&message, &[]),
            }),
        }
    }

    /// The TLS configuration a route's connections use (shared with the checks), or, with
    /// `ca` false, the same without the route's caCert: the platform's roots alone.
    pub fn tls_of(&self, route: &Route, ca: bool) -> Result<Arc<rustls::ClientConfig>, String> {
        let tls = Tls {
            insecure: route.plan.tls.insecure,
            ca: route.plan.tls.ca.clone().filter(|_| ca),
        };
        tls_config(&mut self.state(), &tls)
    }

    /// The proxy a request to `uri` goes through, by the rules the checks follow.
    pub fn proxy_for(&self, uri: &hyper::Uri) -> Option<crate::proxy::Proxy> {
        self.proxies.for_uri(uri).cloned()
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
        Some(
            known_provider(&spec.provider)?
                .endpoint(&config, bucket)
                .key,
        )
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
            if let Some(cached) = state.stores.get(&key) {
                return Ok(cached.store.clone());
            }
            tls_config(&mut state, &plan.tls).map_err(|m| (FailureReason::Config, m))?
        };
        // Built outside the lock: building may read files (the default credential chains).
        let client = connections::Client::new(endpoint.lanes.clone(), tls, self.proxies.clone());
        let store = plan
            .store
            .build(&plan.bucket, Connector(client), self.timeout)
            .map_err(|e| (FailureReason::Config, error_chain(&e)))?;
        // Beyond MAX_STORES, putting drops the least recently used store.
        self.state().stores.put(
            key,
            CachedStore {
                store: store.clone(),
                _endpoint: endpoint.clone(),
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
    let provider = known_provider(&spec.provider);
    let bucket = spec.object_storage.bucket.trim_matches('/');
    format!(
        "listing {}",
        location(provider, bucket, spec.object_storage.prefix.as_deref())
    )
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
