//! The reconciler: keeps checking every BSL and records status.phase Available or Unavailable
//! with lastValidationTime and a message, as Velero's own controller does, without ever
//! blocking or exiting on BSL state.
//!
//! Objects are watched as [`StoredBsl`], whose decoding never fails, so one malformed BSL
//! never breaks the list of the others; it is reported as Unavailable with its field errors.
//!
//! Here: the controller's wiring and one check (due, checked, recorded). Beside it: when a
//! check is due (schedule), the status patch, the Events, the health loop that publishes
//! the server status, and the Secret cache.

mod events;
mod health;
mod schedule;
pub mod secrets;
mod status_patch;
mod writers;

use schedule::jitter;
pub use schedule::{Next, frequency, next_check};
use secrets::SecretCache;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, Semaphore, watch};

use crate::bsl::{BackupStorageLocationSpec, Phase, SecretKeySelector, StoredBsl, StoredStatus};
use crate::metrics::{CheckedProvider, Metrics, ReconcileResult};
use crate::proxy::Proxies;
use crate::retry::Retries;
use crate::rules;
use crate::served_crd::SharedServedCrd;
use crate::status::ServerStatus;
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
    #[error("writing status: the stored spec does not parse: {0}")]
    StoredSpec(#[source] serde_json::Error),
}

impl Error {
    pub fn metric_label(&self) -> ReconcileResult {
        match self {
            Error::WriteStatus(_) | Error::StoredSpec(_) => ReconcileResult::WriteStatusError,
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
    /// The status last sent to each BSL ("namespace/name"), recorded before the write so the
    /// watch event of that write is known as ours however soon it comes.
    sent: Mutex<HashMap<String, Sent>>,
    /// BSLs ("namespace/name") whose status someone else also writes.
    other_writers: Mutex<BTreeSet<String>>,
    /// Bounds concurrent status writes, so thousands of checks do not flood the apiserver.
    writes: Semaphore,
    retries: Mutex<Retries>,
    metrics: Arc<Metrics>,
    health_changed: Notify,
    /// The latest server status, as published; None while this replica does not lead.
    status: watch::Sender<Option<ServerStatus>>,
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
            sent: Mutex::default(),
            other_writers: Mutex::default(),
            writes: Semaphore::new(32),
            retries: Mutex::default(),
            metrics,
            health_changed: Notify::new(),
            status: watch::Sender::new(None),
            config,
        })
    }

    /// The server status while this replica's reconciler runs (the admin port serves it).
    pub fn status(&self) -> watch::Receiver<Option<ServerStatus>> {
        self.status.subscribe()
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Known>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn retries(&self) -> std::sync::MutexGuard<'_, Retries> {
        self.retries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sent(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sent>> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every version of a BSL the watch delivers: one written by someone else after our last
    /// write is noted (each version, not only those a reconcile sees: ours may overwrite
    /// another writer's within the same second).
    fn observe(&self, obj: &StoredBsl) {
        let id = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
        let other = self.sent().get(&id).is_some_and(|sent| {
            let ours = writers::Written {
                time: sent.time.as_deref(),
                phase: sent.phase,
                message: &sent.message,
            };
            writers::another_writer(&ours, &obj.status)
        });
        if other {
            self.note_other_writer(&id, &obj.status);
        }
    }

    fn other_writers(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.other_writers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Says once per BSL, in the log and the server status, that another writer changed its
    /// status between two of our checks.
    fn note_other_writer(&self, id: &str, seen: &StoredStatus) {
        if !self.other_writers().insert(id.to_string()) {
            return;
        }
        tracing::warn!(
            bsl = id,
            phase = seen.phase.map(Phase::as_str),
            last_validation_time = seen.last_validation_time.as_deref(),
            message = seen.message.as_deref(),
            "another writer changed this BSL's status between two of bsl-sentinel's checks: is \
             Velero's BSL controller validating too? Keep one validator (README: Beside a Velero server)"
        );
        self.health_changed.notify_one();
    }
}

/// What this replica last sent to one BSL's status.
struct Sent {
    time: Option<String>,
    phase: Option<Phase>,
    message: String,
}

/// Forgets what this replica knew when it stops leading, so it never serves a stale status.
struct Resign(Arc<Context>);

impl Drop for Resign {
    fn drop(&mut self) {
        self.0.status.send_replace(None);
        self.0.known().clear();
        self.0.sent().clear();
        self.0.other_writers().clear();
    }
}

/// Runs the controller and the health logger until `stopping` turns true (then the checks in
/// flight finish and their status is written) or the task is aborted.
pub async fn run(ctx: Arc<Context>, mut stopping: watch::Receiver<bool>) {
    let _resign = Resign(ctx.clone());
    let api: Api<StoredBsl> = match &ctx.config.namespace {
        Some(namespace) => Api::namespaced(ctx.client.clone(), namespace),
        None => Api::all(ctx.client.clone()),
    };
    // What the reconciler never reads is dropped before it is stored: managedFields and the
    // last-applied annotation are most of a BSL's bytes; spec and status are kept decoded,
    // with the spec's text only for the status patch's test.
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .modify(|bsl: &mut StoredBsl| {
                bsl.managed_fields_mut().clear();
                bsl.annotations_mut().remove(LAST_APPLIED);
            })
            .default_backoff(),
    )
    .applied_objects()
    .inspect_ok({
        let ctx = ctx.clone();
        move |obj| ctx.observe(obj)
    });
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
        futures::future::ready(
            id.split_once('/')
                .map(|(namespace, name)| reflector::ObjectRef::new(name).within(namespace)),
        )
    });
    let (stop_tx, stop_rx) = futures::channel::oneshot::channel::<()>();
    let controller = Controller::for_stream(stream, store.clone())
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
        () = health::health_loop(ctx.clone(), store) => {}
        () = stop => {}
    }
}

fn error_policy(obj: Arc<StoredBsl>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.count_reconcile(error.metric_label());
    let id = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
    let (delay, started) = ctx.retries().failed(&id, Instant::now());
    if started {
        tracing::warn!(%error, "cannot write status; retrying each BSL with backoff (0.5s to 30s)");
    }
    Action::requeue(delay)
}

/// A BSL whose check is due, with what its check needs to know.
struct Due {
    namespace: String,
    name: String,
    /// "namespace/name", as the probe knows the BSL.
    id: String,
    hash: u64,
    period: Duration,
    /// The provider as metrics label it.
    provider: CheckedProvider,
    /// The spec, or why it cannot be checked (unreadable, or against the rules).
    spec: Result<BackupStorageLocationSpec, String>,
}

// Every log line of a check names its BSL, as controller-rs' reconcile spans do.
#[tracing::instrument(skip_all, fields(
    namespace = obj.namespace().unwrap_or_default(),
    name = obj.name_any(),
    uid = obj.metadata.uid.as_deref().unwrap_or_default(),
))]
async fn reconcile(obj: Arc<StoredBsl>, ctx: Arc<Context>) -> Result<Action, Error> {
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
                ctx.metrics.count_reconcile(ReconcileResult::InLine);
                return Ok(Action::requeue(IN_LINE_FALLBACK));
            }
        },
        // Nothing to take a turn for: the verdict is the spec's.
        Err(_) => Slot::NoEndpoint,
    };
    check_and_record(obj, ctx, due, slot).await
}

/// Whether the BSL is due for a check now (Err: when it is).
fn due(obj: &StoredBsl, ctx: &Context) -> Result<Due, Action> {
    let (namespace, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let id = format!("{namespace}/{name}");
    let hash = obj.spec_hash;
    let known = ctx.known().get(&(namespace.clone(), name.clone())).cloned();
    let spec_changed = known.as_ref().is_some_and(|k| k.spec_hash != hash);
    let last = obj
        .status
        .last_validation_time
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok());
    let period = frequency(
        obj.validation_frequency.as_deref(),
        ctx.config.default_frequency,
    );
    // The endpoint answers again after it did not: checked now, whatever the schedule.
    let recheck = ctx.probe.take_recheck(&id);
    match next_check(Timestamp::now(), last, period, spec_changed || recheck) {
        Next::After(left) => {
            ctx.metrics.count_reconcile(ReconcileResult::NotDue);
            ctx.probe.decline(&id);
            return Err(Action::requeue(left + jitter(&namespace, &name, period)));
        }
        Next::OnSpecChange => {
            ctx.metrics.count_reconcile(ReconcileResult::NotDue);
            ctx.probe.decline(&id);
            return Err(Action::await_change());
        }
        Next::Now => {}
    }
    let (provider, spec) = checkable(&obj.spec);
    Ok(Due {
        namespace,
        name,
        id,
        hash,
        period,
        provider,
        spec,
    })
}

/// The spec and the provider's metric label; Err with the BSL's message when the spec cannot
/// be read or breaks the rules (Velero's CRD admits both without the webhook).
fn checkable(
    spec: &Result<BackupStorageLocationSpec, String>,
) -> (CheckedProvider, Result<BackupStorageLocationSpec, String>) {
    let spec = match spec {
        Ok(spec) => spec.clone(),
        Err(e) => {
            return (
                CheckedProvider::Unreadable,
                Err(format!("the spec cannot be read: {e}")),
            );
        }
    };
    let provider = crate::provider::known_provider(&spec.provider)
        .map_or(CheckedProvider::Plugin, CheckedProvider::Known);
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
    obj: Arc<StoredBsl>,
    ctx: Arc<Context>,
    due: Due,
    slot: Slot,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let started = Instant::now();
    let outcome = check(&due, &ctx, slot).await;
    ctx.metrics.observe_check(due.provider, started.elapsed());
    let Due {
        namespace,
        name,
        id,
        hash,
        period,
        ..
    } = due;
    let (phase, message) = match &outcome {
        Outcome::Available => (Some(Phase::Available), String::new()),
        Outcome::Unavailable { reason, message } => {
            ctx.metrics.count_failure(*reason);
            (
                Some(Phase::Unavailable),
                format!("BackupStorageLocation {name:?} is unavailable: {message}"),
            )
        }
        Outcome::Unchecked { message } => (None, message.clone()),
    };

    ctx.sent().insert(
        id.clone(),
        Sent {
            time: phase.map(|_| status_patch::validation_time(now)),
            phase,
            message: message.clone(),
        },
    );
    let sent = Instant::now();
    let written = status_patch::write_status(&ctx, &obj, phase, &message, now).await?;
    if !written {
        // The spec changed under the check: its result is not written, the change is checked.
        ctx.metrics.count_reconcile(ReconcileResult::SpecChanged);
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
    let before = known.and_then(|k| k.phase).or(obj.status.phase);
    ctx.known().insert(
        (namespace.clone(), name.clone()),
        Known {
            spec_hash: hash,
            phase,
            message: message.clone(),
        },
    );
    if phase.is_some() {
        ctx.metrics
            .set_checked(&namespace, &name, obj.default, now, period);
    }
    ctx.metrics
        .set_phase(&namespace, &name, phase.or(Some(Phase::Unknown)));
    ctx.metrics.count_reconcile(ReconcileResult::Checked);
    if events::newsworthy(before, phase) {
        events::announce(&ctx, &obj, phase, &message).await;
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
