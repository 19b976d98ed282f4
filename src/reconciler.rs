//! The reconciler: keeps checking every BSL and records status.phase Available or Unavailable
//! with lastValidationTime and a message, as Velero's own controller does, without ever
//! blocking or exiting on BSL state.
//!
//! Objects are watched as DynamicObject, so one malformed BSL never breaks the list of the
//! others; it is decoded here and reported as Unavailable with its field errors.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use json_patch::{
    AddOperation, Patch as JsonPatch, PatchOperation, TestOperation, jsonptr::PointerBuf,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

use crate::bsl::{BackupStorageLocationSpec, Phase, SecretKeySelector};
use crate::cluster_view::bsl_resource;
use crate::duration::GoDuration;
use crate::health::{self, BslState, Level, Verdict};
use crate::metrics::Metrics;
use crate::proxy::Proxies;
use crate::retry::Retries;
use crate::rules;
use crate::served_crd::SharedServedCrd;
use crate::status::{self, ServerStatus};
use crate::storage::{FailureReason, Outcome, Probe, Slot};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A BSL in line at a busy endpoint is looked at again after this long even if no turn was
/// granted (a guard: turns are granted in order and their BSLs woken).
const IN_LINE_FALLBACK: Duration = Duration::from_secs(60);

/// Reconciles in flight at once: enough for every endpoint's turns to stay busy, a bound so
/// that 10,000 BSLs do not hold 10,000 futures and their objects at once.
const MAX_IN_FLIGHT: u16 = 256;

#[derive(Clone, Debug)]
pub struct ReconcilerConfig {
    /// The namespace whose BSLs are reconciled (Velero watches only its own); None for all.
    pub namespace: Option<String>,
    /// Where the server status ConfigMap is published.
    pub status_namespace: String,
    /// This replica's name, published as the status writer.
    pub identity: String,
    /// Each storage check gives up after this long.
    pub check_timeout: Duration,
    /// validationFrequency for BSLs that set none (Velero's --store-validation-frequency).
    pub default_frequency: Duration,
    /// Most sockets open to, and checks at once of, one storage endpoint.
    pub per_endpoint: usize,
    /// The HTTP proxies storage checks go through.
    pub proxies: Proxies,
    /// How long a read Secret is reused before it is read again.
    pub secret_ttl: Duration,
    /// Health is logged when it changes, and at least this often.
    pub health_reminder: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing status: {0}")]
    WriteStatus(#[source] kube::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::WriteStatus(_) => "write_status_error",
        }
    }
}

/// What this process last checked and wrote for one BSL.
#[derive(Clone, Debug)]
struct Known {
    spec_hash: u64,
    phase: Option<Phase>,
    message: String,
}

pub struct Context {
    client: kube::Client,
    probe: Probe,
    served: SharedServedCrd,
    secrets: SecretCache,
    known: Mutex<HashMap<(String, String), Known>>,
    /// Bounds concurrent status writes, so thousands of checks do not flood the apiserver.
    writes: Semaphore,
    retries: Mutex<Retries>,
    pub metrics: Arc<Metrics>,
    health_changed: Notify,
    /// The latest server status, as published.
    pub status: Mutex<Option<ServerStatus>>,
    config: ReconcilerConfig,
}

impl Context {
    pub fn new(
        client: kube::Client,
        served: SharedServedCrd,
        metrics: Arc<Metrics>,
        config: ReconcilerConfig,
    ) -> Arc<Context> {
        Arc::new(Context {
            secrets: SecretCache::new(client.clone(), config.secret_ttl),
            client,
            probe: Probe::new(config.per_endpoint, config.check_timeout)
                .with_proxies(config.proxies.clone()),
            served,
            known: Mutex::default(),
            writes: Semaphore::new(32),
            retries: Mutex::default(),
            metrics,
            health_changed: Notify::new(),
            status: Mutex::default(),
            config,
        })
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Known>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn retries(&self) -> std::sync::MutexGuard<'_, Retries> {
        self.retries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Forgets what this replica knew when it stops leading, so it never serves a stale status.
struct Resign(Arc<Context>);

impl Drop for Resign {
    fn drop(&mut self) {
        *self.0.status.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.0.known().clear();
    }
}

/// Runs the controller and the health logger until `stopping` turns true (then the checks in
/// flight finish and their status is written) or the task is aborted.
pub async fn run(ctx: Arc<Context>, mut stopping: tokio::sync::watch::Receiver<bool>) {
    let _resign = Resign(ctx.clone());
    let resource = bsl_resource();
    let api: Api<DynamicObject> = match &ctx.config.namespace {
        Some(namespace) => Api::namespaced_with(ctx.client.clone(), namespace, &resource),
        None => Api::all_with(ctx.client.clone(), &resource),
    };
    // What the reconciler never reads is dropped before it is stored (managedFields and the
    // last-applied annotation are most of a BSL's bytes), and the rest is kept as JSON text:
    // 10,000 BSLs cost 120 MiB as parsed values, under 100 as text (the reconciler benchmark).
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .modify(|bsl: &mut DynamicObject| {
                bsl.managed_fields_mut().clear();
                bsl.annotations_mut().remove(LAST_APPLIED);
                compact(bsl);
            })
            .default_backoff(),
    )
    .applied_objects();
    // Reconciles in flight are bounded, and never held by a BSL waiting for its endpoint: one
    // whose endpoint is busy takes its place in line there and its reconcile ends; it comes
    // back through `wakeups` when granted a turn. So slots only hold running checks (at most
    // `per_endpoint` per endpoint, and after a timeout one per silent endpoint).
    let rechecks = futures::stream::unfold(ctx.clone(), |ctx| async move {
        let ids = ctx.probe.wakeups().await;
        Some((futures::stream::iter(ids), ctx))
    })
    .flatten()
    .filter_map(move |id| {
        let resource = bsl_resource();
        futures::future::ready(id.split_once('/').map(|(namespace, name)| {
            reflector::ObjectRef::new_with(name, resource).within(namespace)
        }))
    });
    let (stop_tx, stop_rx) = futures::channel::oneshot::channel::<()>();
    let controller = Controller::for_stream_with(stream, store.clone(), resource)
        .reconcile_on(rechecks)
        .graceful_shutdown_on(async move {
            let _ = stop_rx.await;
        })
        .with_config(controller::Config::default().concurrency(MAX_IN_FLIGHT));
    // One future: a replica that loses the Lease aborts both.
    let controller = controller
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile failed");
            }
            futures::future::ready(())
        });
    let stop = async move {
        let _ = stopping.wait_for(|stop| *stop).await;
        let _ = stop_tx.send(());
        futures::future::pending::<()>().await
    };
    tokio::select! {
        () = controller => {}
        () = health_loop(ctx.clone(), store) => {}
        () = stop => {}
    }
}

fn error_policy(obj: Arc<DynamicObject>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.count_reconcile(error.metric_label());
    let id = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
    let (delay, started) = ctx.retries().failed(&id, Instant::now());
    if started {
        tracing::warn!(%error, "cannot write status; retrying each BSL with backoff (0.5s to 30s)");
    }
    Action::requeue(delay)
}

/// When the next check of a BSL is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Now,
    After(Duration),
    /// validationFrequency 0 and checked once: only a spec change brings a check.
    OnSpecChange,
}

/// Velero's timing: immediately when never validated or the spec changed (compared by
/// content, never by metadata.generation, which Velero's CRD bumps on every status write);
/// then every `frequency` after lastValidationTime; frequency 0 turns periodic checks off.
pub fn next_check(
    now: Timestamp,
    last_validation: Option<Timestamp>,
    frequency: Duration,
    spec_changed: bool,
) -> Next {
    let Some(last) = last_validation.filter(|_| !spec_changed) else {
        return Next::Now;
    };
    if frequency.is_zero() {
        return Next::OnSpecChange;
    }
    let since = now.duration_since(last).unsigned_abs();
    match frequency.checked_sub(since) {
        Some(left) if !left.is_zero() => Next::After(left),
        _ => Next::Now,
    }
}

/// spec.validationFrequency, else the server default; a negative or unparsable value falls
/// back to the default as in Velero.
pub fn frequency(spec: &Value, default: Duration) -> Duration {
    spec["validationFrequency"]
        .as_str()
        .and_then(|text| GoDuration::parse(text).ok())
        .and_then(GoDuration::to_std)
        .unwrap_or(default)
}

/// Spreads periodic checks over up to a tenth of the period, stable per BSL.
fn jitter(namespace: &str, name: &str, period: Duration) -> Duration {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (namespace, name).hash(&mut hasher);
    period.mul_f64((hasher.finish() % 1000) as f64 / 10_000.0)
}

fn spec_hash(spec: &Value) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    spec.to_string().hash(&mut hasher);
    hasher.finish()
}

/// Stores a BSL's spec and status as one JSON string: a parsed serde_json map costs about
/// 600 bytes even with two entries, and a BSL has seven of them.
fn compact(bsl: &mut DynamicObject) {
    let data = std::mem::take(&mut bsl.data);
    bsl.data = Value::String(data.to_string());
}

/// Spec and status of a stored BSL, parsed back.
fn body(bsl: &DynamicObject) -> Value {
    match &bsl.data {
        Value::String(text) => serde_json::from_str(text).unwrap_or_default(),
        other => other.clone(),
    }
}

fn status_str<'a>(body: &'a Value, field: &str) -> Option<&'a str> {
    body["status"][field].as_str()
}

fn phase_of(body: &Value) -> Option<Phase> {
    serde_json::from_value(body["status"]["phase"].clone()).ok()
}

/// A BSL whose check is due, with what its check needs to know.
struct Due {
    namespace: String,
    name: String,
    /// "namespace/name", as the probe knows the BSL.
    id: String,
    /// Spec and status, parsed once.
    body: Value,
    hash: u64,
    period: Duration,
    /// The provider as metrics label it.
    provider: String,
    /// The spec, or why it cannot be checked (unreadable, or against the rules).
    spec: Result<BackupStorageLocationSpec, String>,
}

#[tracing::instrument(skip_all, fields(namespace = obj.namespace().unwrap_or_default(), name = obj.name_any()))]
async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let due = match due(&obj, &ctx) {
        Ok(due) => due,
        Err(action) => return Ok(action),
    };
    let slot = match &due.spec {
        Ok(spec) => match ctx.probe.place(&due.id, spec) {
            Some(slot) => slot,
            None => {
                // In line at a busy endpoint: woken when a turn is granted; the requeue only
                // guards against a lost wake-up.
                ctx.metrics.count_reconcile("in_line");
                return Ok(Action::requeue(IN_LINE_FALLBACK));
            }
        },
        // Nothing to take a turn for: the verdict is the spec's.
        Err(_) => Slot::NoEndpoint,
    };
    check_and_record(obj, ctx, due, slot).await
}

/// Whether the BSL is due for a check now (Err: when it is).
fn due(obj: &DynamicObject, ctx: &Context) -> Result<Due, Action> {
    let (namespace, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let id = format!("{namespace}/{name}");
    let body = body(obj);
    let hash = spec_hash(&body["spec"]);
    let known = ctx.known().get(&(namespace.clone(), name.clone())).cloned();
    let spec_changed = known.as_ref().is_some_and(|k| k.spec_hash != hash);
    let last = status_str(&body, "lastValidationTime").and_then(|t| t.parse::<Timestamp>().ok());
    let period = frequency(&body["spec"], ctx.config.default_frequency);
    // The endpoint answers again after it did not: checked now, whatever the schedule.
    let recheck = ctx.probe.take_recheck(&id);
    match next_check(Timestamp::now(), last, period, spec_changed || recheck) {
        Next::After(left) => {
            ctx.metrics.count_reconcile("not_due");
            ctx.probe.decline(&id);
            return Err(Action::requeue(left + jitter(&namespace, &name, period)));
        }
        Next::OnSpecChange => {
            ctx.metrics.count_reconcile("not_due");
            ctx.probe.decline(&id);
            return Err(Action::await_change());
        }
        Next::Now => {}
    }
    let (provider, spec) = checkable(&body["spec"]);
    Ok(Due {
        namespace,
        name,
        id,
        body,
        hash,
        period,
        provider,
        spec,
    })
}

/// The spec and the provider's metric label; Err with the BSL's message when the spec cannot
/// be read or breaks the rules (Velero's CRD admits both without the webhook).
fn checkable(spec: &Value) -> (String, Result<BackupStorageLocationSpec, String>) {
    let spec: BackupStorageLocationSpec = match serde_json::from_value(spec.clone()) {
        Ok(spec) => spec,
        Err(e) => {
            return (
                "unknown".into(),
                Err(format!("the spec cannot be read: {e}")),
            );
        }
    };
    let provider = crate::provider::known_provider(&spec.provider)
        .map(|p| p.plugin_name().trim_start_matches("velero.io/").to_string())
        .unwrap_or_else(|| "plugin".into());
    let report = rules::validate(&spec);
    if !report.errors.is_empty() {
        let errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
        return (
            provider,
            Err(format!("invalid spec: {}", errors.join("; "))),
        );
    }
    (provider, Ok(spec))
}

async fn check_and_record(
    obj: Arc<DynamicObject>,
    ctx: Arc<Context>,
    due: Due,
    slot: Slot,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let started = Instant::now();
    let outcome = check(&due, &ctx, slot).await;
    ctx.metrics.observe_check(&due.provider, started.elapsed());
    let Due {
        namespace,
        name,
        id,
        body,
        hash,
        period,
        ..
    } = due;
    let (phase, message) = match &outcome {
        Outcome::Available => (Some(Phase::Available), String::new()),
        Outcome::Unavailable { reason, message } => {
            ctx.metrics.count_failure(reason.as_str());
            (
                Some(Phase::Unavailable),
                format!("BackupStorageLocation {name:?} is unavailable: {message}"),
            )
        }
        Outcome::Unchecked { message } => (None, message.clone()),
    };

    let sent = Instant::now();
    let written = write_status(&ctx, &obj, &body, phase, &message, now).await?;
    if !written {
        // The spec changed under the check: its result is not written, the change is checked.
        ctx.metrics.count_reconcile("spec_changed");
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if let Some(ended) = ctx.retries().succeeded(&id, sent, Instant::now()) {
        tracing::info!(
            failures = ended.failures,
            waiting = ended.waiting,
            "status writes work again after {:?}",
            ended.lasted
        );
    }
    let known = ctx.known().get(&(namespace.clone(), name.clone())).cloned();
    let before = known.and_then(|k| k.phase).or_else(|| phase_of(&body));
    ctx.known().insert(
        (namespace.clone(), name.clone()),
        Known {
            spec_hash: hash,
            phase,
            message: message.clone(),
        },
    );
    ctx.metrics
        .set_phase(&namespace, &name, phase.or(Some(Phase::Unknown)));
    ctx.metrics.count_reconcile("checked");
    if newsworthy(before, phase) {
        announce(&ctx, &obj, phase, &message).await;
    }
    ctx.health_changed.notify_one();
    Ok(if period.is_zero() {
        Action::await_change()
    } else {
        Action::requeue(period + jitter(&namespace, &name, period))
    })
}

/// Reads the Secrets the spec names and probes the storage in the BSL's slot at its endpoint.
async fn check(due: &Due, ctx: &Context, slot: Slot) -> Outcome {
    let config_error = |message: String| Outcome::Unavailable {
        reason: FailureReason::Config,
        message,
    };
    let spec = match &due.spec {
        Ok(spec) => spec,
        Err(message) => return config_error(message.clone()),
    };
    let secrets = (
        secret_bytes(ctx, &due.namespace, spec.credential.as_ref()).await,
        secret_bytes(
            ctx,
            &due.namespace,
            spec.object_storage.ca_cert_ref.as_ref(),
        )
        .await,
    );
    let (credential, ca) = match secrets {
        (Ok(credential), Ok(ca)) => (credential, ca),
        (Err(message), _) | (_, Err(message)) => return config_error(message),
    };
    ctx.probe
        .check_in(slot, spec, credential.as_deref(), ca.as_deref(), due.period)
        .await
}

/// The bytes of the Secret key a selector names, if it names one.
async fn secret_bytes(
    ctx: &Context,
    namespace: &str,
    selector: Option<&SecretKeySelector>,
) -> Result<Option<Vec<u8>>, String> {
    match selector {
        Some(s) => ctx.secrets.key(namespace, s.name(), &s.key).await.map(Some),
        None => Ok(None),
    }
}

/// Writes phase, lastValidationTime and message with a JSON patch that first tests that the
/// spec is still the one checked, so a concurrent spec edit is never answered with a stale
/// phase. Only status is touched; on a CRD with a status subresource it goes to /status.
/// Returns false when the spec had changed.
async fn write_status(
    ctx: &Context,
    obj: &DynamicObject,
    body: &Value,
    phase: Option<Phase>,
    message: &str,
    now: Timestamp,
) -> Result<bool, Error> {
    let mut fields = serde_json::Map::new();
    if let Some(phase) = phase {
        fields.insert("phase".into(), json!(phase.as_str()));
        // Every attempt sets lastValidationTime, as in Velero; an unchecked one is no attempt.
        fields.insert(
            "lastValidationTime".into(),
            json!(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        );
    }
    fields.insert("message".into(), json!(message));
    // A BSL without spec (Velero's CRD allows one) has nothing to test.
    let mut ops: Vec<PatchOperation> = body
        .get("spec")
        .map(|spec| {
            PatchOperation::Test(TestOperation {
                path: PointerBuf::from_tokens(["spec"]),
                value: spec.clone(),
            })
        })
        .into_iter()
        .collect();
    if body.get("status").is_some_and(Value::is_object) {
        for (key, value) in fields {
            ops.push(PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["status", key.as_str()]),
                value,
            }));
        }
    } else {
        ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["status"]),
            value: Value::Object(fields),
        }));
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &obj.namespace().unwrap_or_default(),
        &bsl_resource(),
    );
    let patch: Patch<()> = Patch::Json(JsonPatch(ops));
    let params = PatchParams::default();
    let subresource = ctx.served.load().is_some_and(|s| s.status_subresource);
    let _permit = ctx.writes.acquire().await;
    let result = if subresource {
        api.patch_status(&obj.name_any(), &params, &patch).await
    } else {
        api.patch(&obj.name_any(), &params, &patch).await
    };
    match result {
        Ok(_) => {
            tracing::debug!(phase = phase.map(Phase::as_str), "wrote status");
            Ok(true)
        }
        // The only operation that can be invalid is the test: the spec is no longer the one
        // checked (the apiserver says no more than "rejected ... due to an error").
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(false),
        // Deleted meanwhile: nothing left to write.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(true),
        Err(e) => Err(Error::WriteStatus(e)),
    }
}

/// Every phase change is announced with an Event; a BSL left unchecked (plugin) has none.
fn newsworthy(before: Option<Phase>, after: Option<Phase>) -> bool {
    after.is_some() && before != after
}

/// A Kubernetes Event (events.k8s.io/v1) on a phase change. Created directly, not through
/// kube-rs' Recorder: its cache of event series grew by about 35 MiB for 10,000 new BSLs, and
/// a phase change is no series.
async fn announce(ctx: &Context, obj: &DynamicObject, phase: Option<Phase>, message: &str) {
    let (type_, reason, note) = match phase {
        Some(Phase::Available) => (
            "Normal",
            "Available",
            "the storage location is reachable and valid",
        ),
        _ => ("Warning", "Unavailable", message),
    };
    let namespace = obj.namespace().unwrap_or_default();
    let event = KubeEvent {
        metadata: ObjectMeta {
            // A trailing dash is the one character a name prefix may end with.
            generate_name: Some(format!("{}-", obj.name_any())),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(Timestamp::now())),
        type_: Some(type_.into()),
        reason: Some(reason.into()),
        note: Some(note.chars().take(1024).collect()),
        action: Some("Validate".into()),
        regarding: Some(obj.object_ref(&bsl_resource())),
        reporting_controller: Some("bsl-sentinel".into()),
        reporting_instance: Some(ctx.config.identity.clone()),
        ..KubeEvent::default()
    };
    let api: Api<KubeEvent> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(error = %e, "cannot record an event");
    }
}

/// Logs what the BSLs mean for Velero after each round of checks (debounced), when it changes
/// or every `health_reminder`, at the level the situation deserves, and publishes the server
/// status. Never exits.
async fn health_loop(ctx: Arc<Context>, store: Store<DynamicObject>) {
    if store.wait_until_ready().await.is_err() {
        return;
    }
    let mut last: Option<(Level, String)> = None;
    let mut logged_at = Instant::now();
    let mut published_at = Instant::now();
    loop {
        let states = states(&ctx, &store);
        let verdict = health::assess(&states);
        let current = (verdict.level, verdict.message.clone());
        if last.as_ref() != Some(&current) || logged_at.elapsed() >= ctx.config.health_reminder {
            log_verdict(&verdict);
            logged_at = Instant::now();
            last = Some(current);
        }
        let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let status = ServerStatus::new(&verdict, states, &ctx.config.identity, now);
        let changed = {
            let mut current = ctx.status.lock().unwrap_or_else(|e| e.into_inner());
            let changed = current.as_ref().is_none_or(|c| {
                (c.state, &c.message, &c.locations)
                    != (status.state, &status.message, &status.locations)
            });
            *current = Some(status.clone());
            changed
        };
        if changed || published_at.elapsed() >= ctx.config.health_reminder {
            match status::publish(ctx.client.clone(), &ctx.config.status_namespace, &status).await {
                Ok(()) => published_at = Instant::now(),
                Err(e) => tracing::warn!(error = %e, "cannot publish the server status"),
            }
        }
        tokio::select! {
            _ = ctx.health_changed.notified() => {}
            _ = tokio::time::sleep(ctx.config.health_reminder) => {}
        }
        // Let a burst of checks finish before counting.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn log_verdict(verdict: &Verdict) {
    let c = &verdict.counts;
    let (total, available, unavailable, unknown) = (c.total, c.available, c.unavailable, c.unknown);
    match verdict.level {
        Level::Error => tracing::error!(
            total,
            available,
            unavailable,
            unknown,
            "{}",
            verdict.message
        ),
        Level::Warn => tracing::warn!(
            total,
            available,
            unavailable,
            unknown,
            "{}",
            verdict.message
        ),
        Level::Info => tracing::info!(
            total,
            available,
            unavailable,
            unknown,
            "{}",
            verdict.message
        ),
    }
}

/// Every BSL in the store, with the phase this process last wrote where it is newer than the
/// watch has delivered. Forgets BSLs that are gone.
fn states(ctx: &Context, store: &Store<DynamicObject>) -> Vec<BslState> {
    let objects = store.state();
    let mut known = ctx.known();
    let present: std::collections::HashSet<(String, String)> = objects
        .iter()
        .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
        .collect();
    known.retain(|key, _| {
        let keep = present.contains(key);
        if !keep {
            ctx.metrics.forget(&key.0, &key.1);
            let id = format!("{}/{}", key.0, key.1);
            ctx.probe.forget(&id);
            ctx.retries().forget(&id);
        }
        keep
    });
    let mut states: Vec<BslState> = objects
        .iter()
        .map(|o| {
            let key = (o.namespace().unwrap_or_default(), o.name_any());
            let body = body(o);
            let mine = known
                .get(&key)
                .filter(|k| k.spec_hash == spec_hash(&body["spec"]));
            BslState {
                phase: mine.map(|k| k.phase).unwrap_or_else(|| phase_of(&body)),
                message: mine
                    .map(|k| k.message.clone())
                    .or_else(|| status_str(&body, "message").map(String::from))
                    .unwrap_or_default(),
                default: body["spec"]["default"] == Value::Bool(true),
                last_validation_time: status_str(&body, "lastValidationTime").map(String::from),
                namespace: key.0,
                name: key.1,
            }
        })
        .collect();
    states.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    states
}

/// One Secret as last read (None inside: it did not exist), and when; locked while read.
type SecretSlot = tokio::sync::Mutex<Option<(Instant, Option<Secret>)>>;

/// Secrets read with `get` (the only verb bsl-sentinel needs on them), shared for a short
/// time: a thousand BSLs naming one Secret cause one read, not a thousand.
struct SecretCache {
    client: kube::Client,
    ttl: Duration,
    entries: Mutex<HashMap<(String, String), Arc<SecretSlot>>>,
}

impl SecretCache {
    fn new(client: kube::Client, ttl: Duration) -> SecretCache {
        SecretCache {
            client,
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The bytes of one key; the error is the message for the BSL's status.
    async fn key(&self, namespace: &str, name: &str, key: &str) -> Result<Vec<u8>, String> {
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
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let secret = api
                .get_opt(name)
                .await
                .map_err(|e| format!("cannot read Secret {name:?}: {e}"))?;
            *slot = Some((Instant::now(), secret));
        }
        let secret = slot
            .as_ref()
            .and_then(|(_, s)| s.as_ref())
            .ok_or_else(|| format!("Secret {name:?} not found in namespace {namespace:?}"))?;
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| v.0.clone())
            .ok_or_else(|| format!("Secret {name:?} has no key {key:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap_or_default()
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn never_validated_is_checked_now_even_with_frequency_zero() {
        assert_eq!(next_check(at(0), None, MIN, false), Next::Now);
        assert_eq!(next_check(at(0), None, Duration::ZERO, false), Next::Now);
    }

    #[test]
    fn spec_change_is_checked_now() {
        assert_eq!(next_check(at(10), Some(at(5)), MIN, true), Next::Now);
        assert_eq!(
            next_check(at(10), Some(at(5)), Duration::ZERO, true),
            Next::Now
        );
    }

    #[test]
    fn periodic_check_waits_for_the_rest_of_the_period() {
        assert_eq!(
            next_check(at(20), Some(at(0)), MIN, false),
            Next::After(Duration::from_secs(40))
        );
        assert_eq!(next_check(at(60), Some(at(0)), MIN, false), Next::Now);
        assert_eq!(next_check(at(500), Some(at(0)), MIN, false), Next::Now);
    }

    #[test]
    fn frequency_zero_waits_for_a_spec_change() {
        assert_eq!(
            next_check(at(500), Some(at(0)), Duration::ZERO, false),
            Next::OnSpecChange
        );
    }

    #[test]
    fn frequency_comes_from_the_spec_else_the_default() {
        assert_eq!(
            frequency(&json!({"validationFrequency": "30s"}), MIN),
            Duration::from_secs(30)
        );
        assert_eq!(
            frequency(&json!({"validationFrequency": "0s"}), MIN),
            Duration::ZERO
        );
        assert_eq!(frequency(&json!({"validationFrequency": "-5s"}), MIN), MIN);
        assert_eq!(frequency(&json!({"validationFrequency": "soon"}), MIN), MIN);
        assert_eq!(frequency(&json!({}), MIN), MIN);
    }

    #[test]
    fn stored_bsls_keep_spec_and_status_as_text() {
        let data = json!({"spec": {"provider": "aws"}, "status": {"phase": "Available"}});
        let mut bsl = DynamicObject::new("b", &bsl_resource()).data(data.clone());
        compact(&mut bsl);
        assert!(bsl.data.is_string());
        assert_eq!(body(&bsl), data);
        assert_eq!(phase_of(&body(&bsl)), Some(Phase::Available));
    }

    #[test]
    fn events_for_every_phase_change() {
        use Phase::*;
        assert!(newsworthy(Some(Available), Some(Unavailable)));
        assert!(newsworthy(Some(Unavailable), Some(Available)));
        assert!(newsworthy(None, Some(Unavailable)));
        assert!(newsworthy(Some(Unknown), Some(Unavailable)));
        assert!(newsworthy(None, Some(Available)));
        assert!(newsworthy(Some(Unknown), Some(Available)));
        assert!(!newsworthy(Some(Available), Some(Available)));
        assert!(!newsworthy(Some(Available), None));
    }

    #[test]
    fn jitter_is_bounded_and_spreads() {
        let spread: std::collections::HashSet<Duration> = (0..50)
            .map(|i| jitter("velero", &format!("b{i}"), MIN))
            .collect();
        assert!(spread.len() > 10);
        assert!(spread.iter().all(|j| *j < MIN / 10));
    }

    #[test]
    fn spec_hash_ignores_nothing_and_depends_only_on_content() {
        let a = json!({"provider": "aws", "objectStorage": {"bucket": "b"}});
        let b = json!({"objectStorage": {"bucket": "b"}, "provider": "aws"});
        assert_eq!(spec_hash(&a), spec_hash(&b));
        assert_ne!(
            spec_hash(&a),
            spec_hash(&json!({"provider": "aws", "objectStorage": {"bucket": "c"}}))
        );
    }
}
