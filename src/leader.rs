//! Leader election on a coordination.k8s.io Lease, as client-go does it: every replica serves
//! the webhook; only the holder of the Lease runs the reconciler and writes status.
//!
//! Kept here rather than taken from kube-lease-manager: it judges expiry from the holder's
//! timestamps with a tolerated clock skew and bounds no round by a renew deadline, where the
//! rules that matter are few and must be exactly client-go's, so that replicas agree:
//! - a holder steps down when it has not renewed for `renew_deadline` (each round is bounded
//!   by what is left of it, so a request hanging on a partition cannot keep it leading);
//! - another replica takes over only when it has seen no change of the Lease for the whole
//!   `duration` on its own monotonic clock (never by comparing the holder's renewTime with the
//!   local wall clock: nodes' clocks differ);
//! - `renew_deadline` < `duration`, so the old holder has stopped before anyone takes over;
//! - on a graceful stop the holder clears holderIdentity (client-go's ReleaseOnCancel), so the
//!   next holder takes over at its next round instead of after `duration`;
//! - a follower also watches the Lease and runs a round as soon as it is released or deleted,
//!   so a standby replica takes over at once, before a replacement pod has even started.

use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub lease: String,
    /// This replica's name (the pod name).
    pub identity: String,
    /// How long a holder's claim lasts without renewal, as others judge it.
    pub duration: Duration,
    /// How long the holder keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the Lease is renewed or retried.
    pub retry: Duration,
}

impl Election {
    /// client-go's proportions (15 s, 10 s, 2 s): renew deadline 2/3 of the duration, retry a
    /// fifth of it.
    pub fn with_duration(namespace: &str, lease: &str, identity: &str, duration: Duration) -> Self {
        Election {
            namespace: namespace.to_string(),
            lease: lease.to_string(),
            identity: identity.to_string(),
            duration,
            renew_deadline: duration.mul_f64(2.0 / 3.0),
            retry: duration / 5,
        }
    }
}

/// What to do with the Lease as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Create,
    Renew,
    TakeOver,
    Follow { holder: String },
}

/// The Lease record as this replica last saw it change, and when (on the local monotonic
/// clock): a holder is alive while its record keeps changing.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    record: Option<(String, Option<MicroTime>, Option<i32>)>,
    at: Option<Instant>,
}

impl Observed {
    /// Notes the record read at `now`; the clock restarts only when it changed.
    pub fn see(&mut self, spec: Option<&LeaseSpec>, now: Instant) {
        let record = spec.map(|s| {
            (
                s.holder_identity.clone().unwrap_or_default(),
                s.renew_time.clone(),
                s.lease_transitions,
            )
        });
        if record != self.record || self.at.is_none() {
            self.record = record;
            self.at = Some(now);
        }
    }
}

pub fn step(spec: Option<&LeaseSpec>, me: &str, observed: &Observed, now: Instant) -> Step {
    let Some(spec) = spec else {
        return Step::Create;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == me {
        return Step::Renew;
    }
    let seconds = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
    let expired = observed
        .at
        .is_none_or(|at| now >= at + Duration::from_secs(seconds));
    if holder.is_empty() || expired {
        Step::TakeOver
    } else {
        Step::Follow { holder }
    }
}

fn claim(
    previous: Option<&LeaseSpec>,
    election: &Election,
    now: Timestamp,
    taking_over: bool,
) -> LeaseSpec {
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(election.identity.clone()),
        lease_duration_seconds: i32::try_from(election.duration.as_secs().max(1)).ok(),
        acquire_time: if taking_over || previous.is_none() {
            Some(MicroTime(now))
        } else {
            previous.and_then(|p| p.acquire_time.clone())
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if taking_over {
            transitions + 1
        } else {
            transitions
        }),
        ..LeaseSpec::default()
    }
}

/// One round: reads the Lease and claims or renews it. Ok(true) when this replica holds it.
/// Writes carry the resourceVersion read, so two replicas can never both win a round.
pub async fn round(
    api: &Api<Lease>,
    election: &Election,
    observed: &mut Observed,
) -> Result<bool, kube::Error> {
    let current = api.get_opt(&election.lease).await?;
    let spec = current.as_ref().and_then(|l| l.spec.as_ref());
    let now = Instant::now();
    observed.see(spec, now);
    let next = step(spec, &election.identity, observed, now);
    let lease = |spec: LeaseSpec, meta: ObjectMeta| Lease {
        metadata: meta,
        spec: Some(spec),
    };
    let wall = Timestamp::now();
    let result = match (&next, current) {
        (Step::Follow { .. }, _) => return Ok(false),
        (Step::Create, _) => {
            let meta = ObjectMeta {
                name: Some(election.lease.clone()),
                namespace: Some(election.namespace.clone()),
                // What uninstall selects: the Lease is made at run time, not by deploy/.
                labels: Some(std::collections::BTreeMap::from([(
                    "app.kubernetes.io/name".to_owned(),
                    "bsl-sentinel".to_owned(),
                )])),
                ..ObjectMeta::default()
            };
            api.create(
                &PostParams::default(),
                &lease(claim(None, election, wall, false), meta),
            )
            .await
        }
        (Step::Renew | Step::TakeOver, Some(current)) => {
            let spec = claim(
                current.spec.as_ref(),
                election,
                wall,
                next == Step::TakeOver,
            );
            api.replace(
                &election.lease,
                &PostParams::default(),
                &lease(spec, current.metadata),
            )
            .await
        }
        (_, None) => return Ok(false),
    };
    match result {
        Ok(_) => Ok(true),
        // Another replica wrote first: it holds the Lease this round.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the Lease up if this replica holds it: holderIdentity cleared, as client-go's
/// ReleaseOnCancel does, so the next holder need not wait for it to expire.
pub async fn release(api: &Api<Lease>, election: &Election) -> Result<bool, kube::Error> {
    let Some(mut current) = api.get_opt(&election.lease).await? else {
        return Ok(false);
    };
    let Some(spec) = current.spec.as_mut() else {
        return Ok(false);
    };
    if spec.holder_identity.as_deref() != Some(election.identity.as_str()) {
        return Ok(false);
    }
    let now = MicroTime(Timestamp::now());
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now.clone());
    spec.acquire_time = Some(now);
    api.replace(&election.lease, &PostParams::default(), &current)
        .await?;
    Ok(true)
}

/// Runs `lead` while this replica holds the Lease and stops it when the Lease is lost or has
/// not been renewed within the renew deadline. Returns once `stop` turns true, after stopping
/// `lead` (it gets `stopping`, to finish its work, and at most `drain` to do it) and
/// releasing the Lease.
pub async fn run<F, Fut>(
    client: kube::Client,
    election: Election,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
    lead: F,
) where
    F: Fn(watch::Receiver<bool>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let released = std::sync::Arc::new(Notify::new());
    let watching = tokio::spawn(watch_releases(
        api.clone(),
        election.lease.clone(),
        released.clone(),
    ));
    let mut leading: Option<Leading> = None;
    let mut last_renewed = Instant::now();
    let mut observed = Observed::default();
    let mut failures = 0u32;
    loop {
        if *stop.borrow() {
            break;
        }
        // A round never outlasts what is left of the renew deadline while leading.
        let budget = match &leading {
            Some(_) => election
                .renew_deadline
                .saturating_sub(last_renewed.elapsed()),
            None => election.renew_deadline,
        };
        let began = Instant::now();
        let renewed = match tokio::time::timeout(budget, round(&api, &election, &mut observed))
            .await
        {
            Ok(Ok(held)) => {
                if failures > 0 {
                    tracing::info!(lease = %election.lease, failures, "the Lease can be read again");
                }
                failures = 0;
                Some(held)
            }
            failed => {
                failures += 1;
                if failures == 1 {
                    let error = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {budget:?}"),
                    };
                    tracing::warn!(%error, lease = %election.lease, "cannot read or renew the Lease");
                }
                None
            }
        };
        // A failed round keeps a holder leading only until its last renewal's deadline.
        let held = match renewed {
            Some(held) => held,
            None => leading.is_some() && last_renewed.elapsed() < election.renew_deadline,
        };
        if renewed == Some(true) {
            // The renewTime written is no later than this, so others judge from later still.
            last_renewed = began;
        }
        match (held, leading.take()) {
            (true, None) => {
                tracing::info!(identity = %election.identity, "elected: running the reconciler");
                leading = Some(Leading::start(&lead));
            }
            (true, Some(task)) => leading = Some(task),
            (false, Some(task)) => {
                tracing::warn!(
                    identity = %election.identity,
                    "lost the Lease or could not renew it in time: stopping the reconciler"
                );
                task.abort();
            }
            (false, None) => {}
        }
        let following = leading.is_none();
        tokio::select! {
            _ = tokio::time::sleep(election.retry) => {}
            _ = released.notified(), if following => {}
            _ = stop.changed() => {}
        }
    }
    watching.abort();
    if let Some(task) = leading {
        task.finish(drain).await;
        match tokio::time::timeout(
            election.retry.max(Duration::from_secs(1)),
            release(&api, &election),
        )
        .await
        {
            Ok(Ok(true)) => tracing::info!(lease = %election.lease, "released the Lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot release the Lease"),
            Err(_) => tracing::warn!("cannot release the Lease: no answer in time"),
        }
    }
}

/// Wakes the election loop whenever the Lease is released (no holder) or deleted. Renewals do
/// not wake it: a follower learns of those at its next round.
async fn watch_releases(api: Api<Lease>, lease: String, released: std::sync::Arc<Notify>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={lease}"));
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    while let Some(event) = events.next().await {
        let free = match event {
            Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => lease
                .spec
                .and_then(|s| s.holder_identity)
                .is_none_or(|holder| holder.is_empty()),
            Ok(watcher::Event::Delete(_)) => true,
            Ok(watcher::Event::Init | watcher::Event::InitDone) => false,
            Err(error) => {
                tracing::debug!(%error, "watching the Lease; the rounds go on without it");
                false
            }
        };
        if free {
            released.notify_one();
        }
    }
}

/// The reconciler while this replica leads.
struct Leading {
    task: tokio::task::JoinHandle<()>,
    stopping: watch::Sender<bool>,
}

impl Leading {
    fn start<F, Fut>(lead: &F) -> Leading
    where
        F: Fn(watch::Receiver<bool>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (stopping, rx) = watch::channel(false);
        Leading {
            task: tokio::spawn(lead(rx)),
            stopping,
        }
    }

    fn abort(self) {
        self.task.abort();
    }

    /// Asks the reconciler to finish its work, and stops it after `drain` if it has not.
    async fn finish(mut self, drain: Duration) {
        let _ = self.stopping.send(true);
        if tokio::time::timeout(drain, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed: i64, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(seconds),
            renew_time: Some(MicroTime(
                Timestamp::from_second(renewed).unwrap_or_default(),
            )),
            ..LeaseSpec::default()
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or_default()
    }

    fn seen(spec: &LeaseSpec, now: Instant) -> Observed {
        let mut observed = Observed::default();
        observed.see(Some(spec), now);
        observed
    }

    #[test]
    fn absent_lease_is_created() {
        assert_eq!(
            step(None, "a", &Observed::default(), Instant::now()),
            Step::Create
        );
    }

    #[test]
    fn own_lease_is_renewed() {
        let lease = spec("a", 90, 15);
        let now = Instant::now();
        assert_eq!(
            step(Some(&lease), "a", &seen(&lease, now), now),
            Step::Renew
        );
    }

    #[test]
    fn a_holder_is_followed_until_its_record_stands_still_for_the_duration() {
        let now = Instant::now();
        let lease = spec("b", 90, 15);
        let observed = seen(&lease, now);
        let follow = Step::Follow { holder: "b".into() };
        assert_eq!(step(Some(&lease), "a", &observed, now), follow);
        assert_eq!(
            step(Some(&lease), "a", &observed, now + Duration::from_secs(14)),
            follow
        );
        assert_eq!(
            step(Some(&lease), "a", &observed, now + Duration::from_secs(15)),
            Step::TakeOver
        );
    }

    #[test]
    fn expiry_ignores_the_holders_wall_clock() {
        // A renewTime far in the past (the holder's clock is behind) is no expiry while the
        // record keeps changing; one far in the future (ahead) does not keep it alive.
        let now = Instant::now();
        let mut observed = Observed::default();
        observed.see(Some(&spec("b", 10, 15)), now);
        let later = now + Duration::from_secs(10);
        let renewed = spec("b", 20, 15);
        observed.see(Some(&renewed), later);
        assert_eq!(
            step(
                Some(&renewed),
                "a",
                &observed,
                later + Duration::from_secs(14)
            ),
            Step::Follow { holder: "b".into() }
        );
        let ahead = spec("b", 4_000_000_000, 15);
        let observed = seen(&ahead, now);
        assert_eq!(
            step(Some(&ahead), "a", &observed, now + Duration::from_secs(16)),
            Step::TakeOver
        );
    }

    #[test]
    fn a_released_lease_is_taken_over_at_once() {
        let now = Instant::now();
        let released = spec("", 99, 1);
        assert_eq!(
            step(Some(&released), "a", &seen(&released, now), now),
            Step::TakeOver
        );
    }

    #[test]
    fn take_over_counts_a_transition_and_renew_keeps_acquire_time() {
        let election = Election::with_duration("velero", "l", "a", Duration::from_secs(15));
        assert_eq!(election.renew_deadline, Duration::from_secs(10));
        assert_eq!(election.retry, Duration::from_secs(3));
        let mut old = spec("b", 80, 15);
        old.lease_transitions = Some(3);
        old.acquire_time = Some(MicroTime(at(10)));
        let taken = claim(Some(&old), &election, at(100), true);
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(100))));
        let renewed = claim(Some(&old), &election, at(100), false);
        assert_eq!(renewed.lease_transitions, Some(3));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(10))));
        assert_eq!(renewed.holder_identity.as_deref(), Some("a"));
    }
}
