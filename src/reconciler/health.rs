//! The health loop: what the BSLs mean for Velero ([`crate::health`] judges it), logged and
//! published as the server status. Here rather than beside the pure judgement because it
//! reads what this reconciler last wrote and forgets deleted BSLs in the reconciler's state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use super::Context;
use crate::bsl::StoredBsl;
use crate::health::{self, BslState, Level, Verdict};
use crate::status::{self, ServerStatus};

/// or every `health_reminder`, at the level the situation deserves, and publishes the server
/// status. Never exits.
pub(super) async fn health_loop(ctx: Arc<Context>, store: Store<StoredBsl>) {
    if store.wait_until_ready().await.is_err() {
        return;
    }
    let mut last: Option<(Level, String)> = None;
    let mut logged_at = Instant::now();
    // What was last written and when: a failed write is retried on the next pass, and an
    // apiserver outage is logged once, not on every pass.
    let mut published: Option<(ServerStatus, Instant)> = None;
    let mut publish_failing = false;
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
        let others = ctx.other_writers().iter().cloned().collect();
        let status = ServerStatus::new(&verdict, states, &ctx.config.identity, now)
            .with_other_writers(others);
        ctx.status.send_replace(Some(status.clone()));
        let last_written = published.as_ref().map(|(s, at)| (s, at.elapsed()));
        if status::publish_due(last_written, &status, ctx.config.health_reminder) {
            match status::publish(ctx.client.clone(), &ctx.config.status_namespace, &status).await {
                Ok(()) => {
                    if publish_failing {
                        tracing::info!("the server status is published again");
                    }
                    publish_failing = false;
                    published = Some((status, Instant::now()));
                }
                Err(e) if publish_failing => {
                    tracing::debug!(error = %e, "cannot publish the server status")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot publish the server status; retrying on each pass");
                    publish_failing = true;
                }
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
fn states(ctx: &Context, store: &Store<StoredBsl>) -> Vec<BslState> {
    let objects = store.state();
    let mut known = ctx.known();
    let mut states: Vec<BslState> = objects
        .iter()
        .map(|o| {
            let key = (o.namespace().unwrap_or_default(), o.name_any());
            let mine = known.get(&key).filter(|k| k.spec_hash == o.spec_hash);
            BslState {
                phase: mine.map(|k| k.phase).unwrap_or(o.status.phase),
                message: mine
                    .map(|k| k.message.clone())
                    .or_else(|| o.status.message.clone())
                    .unwrap_or_default(),
                default: o.default,
                last_validation_time: o.status.last_validation_time.clone(),
                namespace: key.0,
                name: key.1,
            }
        })
        .collect();
    // Names are unique within a namespace, so an unstable sort gives the one order.
    states.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    // Sorted, the states answer "still there?" by binary search, so no set of every key is
    // built and hashed on each pass.
    known.retain(|(namespace, name), _| {
        let keep = states
            .binary_search_by(|s| (&s.namespace, &s.name).cmp(&(namespace, name)))
            .is_ok();
        if !keep {
            ctx.metrics.forget(namespace, name);
            let id = format!("{namespace}/{name}");
            ctx.probe.forget(&id);
            ctx.retries().forget(&id);
            ctx.sent().remove(&id);
            ctx.other_writers().remove(&id);
        }
        keep
    });
    states
}
