//! The server status: built by the reconciler leader from the BSLs it checks, published in
//! ConfigMap `bsl-sentinel-status` (readable by anyone who can read the namespace), served as
//! JSON at /status on the admin port, and printed by `bsl-sentinel status`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Deserialize, Serialize};

use crate::bsl::Phase;
use crate::health::{BslState, Counts, ServerState, Verdict, server_state};

pub const CONFIGMAP: &str = "bsl-sentinel-status";
/// A ConfigMap holds at most 1 MiB: the status names this many BSLs, those not Available
/// first, and counts the rest.
const MAX_LISTED: usize = 200;
const KEY: &str = "status.json";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    pub state: ServerState,
    pub message: String,
    /// The replica that holds the Lease and writes status.
    pub leader: String,
    pub updated: String,
    pub counts: Counts,
    pub locations: Vec<BslState>,
    /// BSLs left out of `locations` (all counted in `counts`).
    #[serde(default)]
    pub omitted: usize,
    /// BSLs ("namespace/name") whose status another writer also changes, such as Velero's
    /// own BSL controller: two validators are running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_writers: Vec<String>,
}

impl ServerStatus {
    pub fn new(
        verdict: &Verdict,
        mut locations: Vec<BslState>,
        leader: &str,
        updated: String,
    ) -> Self {
        let state = server_state(&locations);
        locations.sort_by_key(|b| b.phase == Some(Phase::Available));
        let omitted = locations.len().saturating_sub(MAX_LISTED);
        locations.truncate(MAX_LISTED);
        ServerStatus {
            state,
            message: verdict.message.clone(),
            leader: leader.to_string(),
            updated,
            counts: verdict.counts.clone(),
            locations,
            omitted,
            other_writers: Vec::new(),
        }
    }

    pub fn with_other_writers(mut self, other_writers: Vec<String>) -> Self {
        self.other_writers = other_writers;
        self
    }

    /// What `bsl-sentinel status` prints.
    pub fn table(&self) -> String {
        let mut out = format!(
            "STATE: {:?}\n{}\nleader {}, updated {}\n\n",
            self.state, self.message, self.leader, self.updated
        );
        if !self.other_writers.is_empty() {
            out.push_str(&format!(
                "another writer also changes the status of {} (is Velero's BSL controller \
                 validating too?)\n\n",
                self.other_writers.join(", ")
            ));
        }
        let rows: Vec<[String; 6]> = self
            .locations
            .iter()
            .map(|b| {
                [
                    b.namespace.clone(),
                    b.name.clone(),
                    b.phase.map(Phase::as_str).unwrap_or("Unknown").to_string(),
                    b.last_validation_time
                        .clone()
                        .unwrap_or_else(|| "Unknown".into()),
                    if b.default {
                        "true".into()
                    } else {
                        String::new()
                    },
                    b.message.clone(),
                ]
            })
            .collect();
        out.push_str(&crate::listing::columns(
            &[
                "NAMESPACE",
                "NAME",
                "PHASE",
                "LAST VALIDATED",
                "DEFAULT",
                "MESSAGE",
            ],
            &rows,
        ));
        out
    }
}

/// A status whose only news is later validation times waits this long after the last write:
/// on Velero's 1-minute validation some time moves on nearly every health pass, and the
/// ConfigMap (up to 200 locations) was rewritten 35 times in 120 s at 1,000 BSLs
/// (BENCHMARKS.md).
const TIMES_ONLY_EVERY: Duration = Duration::from_secs(30);

/// Whether `new` should be written, given the status last written and how long ago: at once
/// when what it says changes (state, message, counts, a listed BSL's phase, default or message,
/// the other writers), after [`TIMES_ONLY_EVERY`] when only validation times moved, and at
/// least every `reminder`.
pub fn publish_due(
    last: Option<(&ServerStatus, Duration)>,
    new: &ServerStatus,
    reminder: Duration,
) -> bool {
    let Some((last, ago)) = last else {
        return true;
    };
    fn news(s: &ServerStatus) -> (ServerState, &str, &Counts, usize, &[String], usize) {
        (
            s.state,
            &s.message,
            &s.counts,
            s.omitted,
            &s.other_writers,
            s.locations.len(),
        )
    }
    if news(last) != news(new) {
        return true;
    }
    let mut times_moved = false;
    for (a, b) in last.locations.iter().zip(&new.locations) {
        if (&a.namespace, &a.name, a.phase, a.default, &a.message)
            != (&b.namespace, &b.name, b.phase, b.default, &b.message)
        {
            return true;
        }
        times_moved |= a.last_validation_time != b.last_validation_time;
    }
    ago >= reminder || (times_moved && ago >= TIMES_ONLY_EVERY)
}

/// Writes the status with server-side apply; only the leader calls this.
pub async fn publish(
    client: kube::Client,
    namespace: &str,
    status: &ServerStatus,
) -> Result<(), kube::Error> {
    let json = serde_json::to_string_pretty(status).map_err(kube::Error::SerdeError)?;
    let configmap = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(CONFIGMAP.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".into(),
                "bsl-sentinel".into(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(KEY.into(), json)])),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&configmap).map_err(kube::Error::SerdeError)?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "ConfigMap".into();
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let params = PatchParams::apply("bsl-sentinel").force();
    api.patch(CONFIGMAP, &params, &Patch::Apply(&value)).await?;
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot read ConfigMap {namespace}/{CONFIGMAP}: {source}")]
    Api {
        namespace: String,
        source: kube::Error,
    },
    #[error(
        "no server status published in namespace {0}: is bsl-sentinel running with its reconciler there?"
    )]
    Missing(String),
    #[error("the published server status cannot be read: {0}")]
    Malformed(serde_json::Error),
}

pub async fn fetch(client: kube::Client, namespace: &str) -> Result<ServerStatus, FetchError> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let configmap = api
        .get_opt(CONFIGMAP)
        .await
        .map_err(|source| FetchError::Api {
            namespace: namespace.into(),
            source,
        })?;
    let json = configmap
        .and_then(|c| c.data)
        .and_then(|mut d| d.remove(KEY))
        .ok_or_else(|| FetchError::Missing(namespace.into()))?;
    serde_json::from_str(&json).map_err(FetchError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::assess;

    #[test]
    fn large_fleets_list_the_unavailable_first_and_count_the_rest() {
        let locations: Vec<BslState> = (0..500)
            .map(|i| BslState {
                namespace: "velero".into(),
                name: format!("b{i:03}"),
                phase: Some(if i == 450 {
                    Phase::Unavailable
                } else {
                    Phase::Available
                }),
                default: i == 0,
                message: String::new(),
                last_validation_time: None,
            })
            .collect();
        let status = ServerStatus::new(&assess(&locations), locations, "a", String::new());
        assert_eq!(status.locations.len(), MAX_LISTED);
        assert_eq!(status.omitted, 300);
        assert_eq!(status.locations[0].name, "b450");
        assert_eq!(status.counts.total, 500);
        assert_eq!(status.state, ServerState::Degraded);
        assert!(
            serde_json::to_string(&status)
                .map(|j| j.len())
                .unwrap_or(usize::MAX)
                < 1024 * 1024
        );
    }

    #[test]
    fn table_and_json_round_trip() {
        let locations = vec![BslState {
            namespace: "velero".into(),
            name: "default".into(),
            phase: Some(Phase::Available),
            default: true,
            message: String::new(),
            last_validation_time: Some("2026-12-02T10:11:12Z".into()),
        }];
        let status = ServerStatus::new(
            &assess(&locations),
            locations,
            "pod-a",
            "2026-12-02T10:11:13Z".into(),
        );
        assert_eq!(status.state, ServerState::Ready);
        let table = status.table();
        assert!(table.starts_with("STATE: Ready\n"), "{table}");
        assert!(
            table.contains("\nvelero     default  Available  2026-12-02T10:11:12Z  true\n"),
            "{table}"
        );
        let json = serde_json::to_string(&status).unwrap_or_default();
        assert_eq!(status.omitted, 0);
        let back: Option<ServerStatus> = serde_json::from_str(&json).ok();
        assert_eq!(back, Some(status));
    }

    #[test]
    fn only_news_is_written_at_once_and_later_validation_times_wait() {
        let location = |phase, time: &str| BslState {
            namespace: "velero".into(),
            name: "default".into(),
            phase: Some(phase),
            default: true,
            message: String::new(),
            last_validation_time: Some(time.into()),
        };
        let status = |location: BslState| {
            ServerStatus::new(
                &assess(std::slice::from_ref(&location)),
                vec![location],
                "pod-a",
                String::new(),
            )
        };
        let reminder = Duration::from_secs(300);
        let second = Duration::from_secs(1);
        let first = status(location(Phase::Available, "2026-12-07T10:00:00Z"));
        assert!(publish_due(None, &first, reminder));
        // Nothing new: not until the reminder.
        assert!(!publish_due(Some((&first, second)), &first, reminder));
        assert!(publish_due(Some((&first, reminder)), &first, reminder));
        // Only a later validation time: after TIMES_ONLY_EVERY, not on every check.
        let later = status(location(Phase::Available, "2026-12-07T10:01:00Z"));
        assert!(!publish_due(Some((&first, second)), &later, reminder));
        assert!(publish_due(
            Some((&first, TIMES_ONLY_EVERY)),
            &later,
            reminder
        ));
        // A phase change, or another writer seen: at once.
        let down = status(location(Phase::Unavailable, "2026-12-07T10:01:00Z"));
        assert!(publish_due(Some((&first, second)), &down, reminder));
        let shared = first
            .clone()
            .with_other_writers(vec!["velero/default".into()]);
        assert!(publish_due(Some((&first, second)), &shared, reminder));
    }

    #[test]
    fn other_writers_are_named_in_the_table_and_kept_in_json() {
        let status = ServerStatus::new(&assess(&[]), Vec::new(), "pod-a", String::new())
            .with_other_writers(vec!["velero/default".into()]);
        assert!(
            status
                .table()
                .contains("another writer also changes the status of velero/default"),
            "{}",
            status.table()
        );
        let json = serde_json::to_string(&status).unwrap_or_default();
        assert!(
            json.contains(r#""otherWriters":["velero/default"]"#),
            "{json}"
        );
        let back: Option<ServerStatus> = serde_json::from_str(&json).ok();
        assert_eq!(back, Some(status));
        // Absent when none: the published JSON of a single writer is unchanged.
        let single = ServerStatus::new(&assess(&[]), Vec::new(), "pod-a", String::new());
        let json = serde_json::to_string(&single).unwrap_or_default();
        assert!(!json.contains("otherWriters"), "{json}");
    }
}
