//! Leader election on a coordination.k8s.io Lease, as client-go does it: every replica serves
//! the webhook; only the holder of the Lease runs the reconciler and writes status. A holder
//! that stops renewing is replaced once its lease has run out.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;

#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub lease: String,
    /// This replica's name (the pod name).
    pub identity: String,
    /// How long a holder's claim lasts without renewal.
    pub duration: Duration,
    /// How often the Lease is renewed or retried.
    pub retry: Duration,
}

/// What to do with the Lease as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Create,
    Renew,
    TakeOver,
    Follow { holder: String },
}

pub fn step(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Step {
    let Some(spec) = spec else {
        return Step::Create;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == me {
        return Step::Renew;
    }
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    let expired = match &spec.renew_time {
        Some(renewed) => renewed.0.as_second() + seconds <= now.as_second(),
        None => true,
    };
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
        lease_duration_seconds: i32::try_from(election.duration.as_secs()).ok(),
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
pub async fn round(api: &Api<Lease>, election: &Election) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let current = api.get_opt(&election.lease).await?;
    let spec = current.as_ref().and_then(|l| l.spec.as_ref());
    let next = step(spec, &election.identity, now);
    let lease = |spec: LeaseSpec, meta: ObjectMeta| Lease {
        metadata: meta,
        spec: Some(spec),
    };
    let result = match (&next, current) {
        (Step::Follow { .. }, _) => return Ok(false),
        (Step::Create, _) => {
            let meta = ObjectMeta {
                name: Some(election.lease.clone()),
                namespace: Some(election.namespace.clone()),
                ..ObjectMeta::default()
            };
            api.create(
                &PostParams::default(),
                &lease(claim(None, election, now, false), meta),
            )
            .await
        }
        (Step::Renew | Step::TakeOver, Some(current)) => {
            let spec = claim(current.spec.as_ref(), election, now, next == Step::TakeOver);
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

/// Runs `lead` while this replica holds the Lease and stops it when the Lease is lost (or
/// cannot be renewed before it would expire). Never returns.
pub async fn run<F, Fut>(client: kube::Client, election: Election, lead: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let mut leading: Option<tokio::task::JoinHandle<()>> = None;
    let mut last_renewed = tokio::time::Instant::now();
    loop {
        let held = match round(&api, &election).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, lease = %election.lease, "cannot read or renew the Lease");
                // Keep leading only while the last renewal still covers us.
                leading.is_some() && last_renewed.elapsed() < election.duration.mul_f64(0.8)
            }
        };
        if held {
            last_renewed = tokio::time::Instant::now();
        }
        match (held, leading.take()) {
            (true, None) => {
                tracing::info!(identity = %election.identity, "elected: running the reconciler");
                leading = Some(tokio::spawn(lead()));
            }
            (true, Some(task)) => leading = Some(task),
            (false, Some(task)) => {
                tracing::warn!(identity = %election.identity, "lost the Lease: stopping the reconciler");
                task.abort();
            }
            (false, None) => {}
        }
        tokio::time::sleep(election.retry).await;
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

    #[test]
    fn absent_lease_is_created() {
        assert_eq!(step(None, "a", at(100)), Step::Create);
    }

    #[test]
    fn own_lease_is_renewed() {
        assert_eq!(step(Some(&spec("a", 90, 15)), "a", at(100)), Step::Renew);
    }

    #[test]
    fn live_holder_is_followed() {
        assert_eq!(
            step(Some(&spec("b", 90, 15)), "a", at(100)),
            Step::Follow { holder: "b".into() }
        );
    }

    #[test]
    fn expired_or_empty_holder_is_taken_over() {
        assert_eq!(step(Some(&spec("b", 80, 15)), "a", at(100)), Step::TakeOver);
        assert_eq!(step(Some(&spec("", 99, 15)), "a", at(100)), Step::TakeOver);
    }

    #[test]
    fn take_over_counts_a_transition_and_renew_keeps_acquire_time() {
        let election = Election {
            namespace: "velero".into(),
            lease: "l".into(),
            identity: "a".into(),
            duration: Duration::from_secs(15),
            retry: Duration::from_secs(2),
        };
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
