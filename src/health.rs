//! What the set of BSLs means for Velero, as the seed discussion asked: an error when there is
//! no BSL or none is available, a warning when some are unavailable or the default is not
//! right, info otherwise. Pure: the counts come from what the reconciler knows, including the
//! phases it has just written (Velero logs a fresh Available BSL as "0/0/1 unknown" at error
//! level because it counts from a list read before its own patch).

use serde::{Deserialize, Serialize};

use crate::bsl::Phase;

/// One BSL as health sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BslState {
    pub namespace: String,
    pub name: String,
    /// None or Unknown: not checked yet.
    pub phase: Option<Phase>,
    pub default: bool,
    pub message: String,
    pub last_validation_time: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Level {
    Info,
    Warn,
    Error,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub total: usize,
    pub available: usize,
    pub unavailable: usize,
    pub unknown: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub level: Level,
    pub message: String,
    pub counts: Counts,
}

/// How many unavailable BSLs a message names before it says "and N more".
const NAMED: usize = 3;

pub fn assess(bsls: &[BslState]) -> Verdict {
    let mut counts = Counts {
        total: bsls.len(),
        ..Counts::default()
    };
    for bsl in bsls {
        match bsl.phase {
            Some(Phase::Available) => counts.available += 1,
            Some(Phase::Unavailable) => counts.unavailable += 1,
            Some(Phase::Unknown) | None => counts.unknown += 1,
        }
    }
    let tally = format!(
        "{} available, {} unavailable, {} not yet checked",
        counts.available, counts.unavailable, counts.unknown
    );
    let unavailable = reasons(bsls);
    let defaults: Vec<&BslState> = bsls.iter().filter(|b| b.default).collect();
    let (level, message) = if counts.total == 0 {
        (
            Level::Error,
            "no BackupStorageLocation exists: at least one is required for backups".to_string(),
        )
    } else if counts.available == 0 && counts.unknown == 0 {
        (
            Level::Error,
            format!(
                "all {} BackupStorageLocations are unavailable: {unavailable}",
                counts.total
            ),
        )
    } else if counts.available == 0 {
        let level = if counts.unavailable > 0 {
            Level::Warn
        } else {
            Level::Info
        };
        let mut message = format!("no BackupStorageLocation is available yet ({tally})");
        if counts.unavailable > 0 {
            message.push_str(&format!("; unavailable: {unavailable}"));
        }
        (level, message)
    } else if counts.unavailable > 0 {
        (
            Level::Warn,
            format!("some BackupStorageLocations are unavailable ({tally}): {unavailable}"),
        )
    } else {
        match defaults.as_slice() {
            [] => (
                Level::Warn,
                format!(
                    "no BackupStorageLocation is the default ({tally}); backups must name a location"
                ),
            ),
            [one] if one.phase == Some(Phase::Available) => (
                Level::Info,
                format!(
                    "BackupStorageLocations healthy ({tally}); default {}",
                    qualified(one)
                ),
            ),
            [one] => (
                Level::Info,
                format!(
                    "BackupStorageLocations healthy so far ({tally}); default {} not yet checked",
                    qualified(one)
                ),
            ),
            many => (
                Level::Warn,
                format!(
                    "{} BackupStorageLocations are marked default ({}); Velero keeps only the newest",
                    many.len(),
                    many.iter()
                        .map(|b| qualified(b))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        }
    };
    Verdict {
        level,
        message,
        counts,
    }
}

fn qualified(bsl: &BslState) -> String {
    format!("{}/{}", bsl.namespace, bsl.name)
}

/// "ns/a (why), ns/b (why) and 4 more"
fn reasons(bsls: &[BslState]) -> String {
    let bad: Vec<&BslState> = bsls
        .iter()
        .filter(|b| b.phase == Some(Phase::Unavailable))
        .collect();
    let mut text: Vec<String> = bad
        .iter()
        .take(NAMED)
        .map(|b| format!("{} ({})", qualified(b), b.message))
        .collect();
    if bad.len() > NAMED {
        text.push(format!("and {} more", bad.len() - NAMED));
    }
    text.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bsl(name: &str, phase: Option<Phase>, default: bool) -> BslState {
        BslState {
            namespace: "velero".into(),
            name: name.into(),
            phase,
            default,
            message: if phase == Some(Phase::Unavailable) {
                format!("{name} is down")
            } else {
                String::new()
            },
            last_validation_time: None,
        }
    }

    const A: Option<Phase> = Some(Phase::Available);
    const U: Option<Phase> = Some(Phase::Unavailable);

    #[test]
    fn no_bsl_is_an_error() {
        let v = assess(&[]);
        assert_eq!(v.level, Level::Error);
        assert!(v.message.contains("at least one is required"));
    }

    #[test]
    fn all_unavailable_is_an_error_with_reasons() {
        let v = assess(&[bsl("a", U, true), bsl("b", U, false)]);
        assert_eq!(v.level, Level::Error);
        assert_eq!(
            v.message,
            "all 2 BackupStorageLocations are unavailable: velero/a (a is down), velero/b (b is down)"
        );
        assert_eq!(
            v.counts,
            Counts {
                total: 2,
                available: 0,
                unavailable: 2,
                unknown: 0
            }
        );
    }

    #[test]
    fn mixed_is_a_warning_naming_the_bad_ones() {
        let v = assess(&[bsl("a", A, true), bsl("b", U, false)]);
        assert_eq!(v.level, Level::Warn);
        assert_eq!(
            v.message,
            "some BackupStorageLocations are unavailable (1 available, 1 unavailable, 0 not yet checked): velero/b (b is down)"
        );
    }

    #[test]
    fn many_unavailable_are_summarised() {
        let mut all = vec![bsl("ok", A, true)];
        all.extend((0..5).map(|i| bsl(&format!("u{i}"), U, false)));
        let v = assess(&all);
        assert!(
            v.message.ends_with("velero/u2 (u2 is down), and 2 more"),
            "{}",
            v.message
        );
    }

    #[test]
    fn all_available_without_default_warns() {
        let v = assess(&[bsl("a", A, false), bsl("b", A, false)]);
        assert_eq!(v.level, Level::Warn);
        assert!(
            v.message
                .starts_with("no BackupStorageLocation is the default"),
            "{}",
            v.message
        );
    }

    #[test]
    fn two_defaults_warn() {
        let v = assess(&[bsl("a", A, true), bsl("b", A, true)]);
        assert_eq!(v.level, Level::Warn);
        assert!(
            v.message
                .contains("2 BackupStorageLocations are marked default (velero/a, velero/b)")
        );
    }

    #[test]
    fn fresh_available_default_is_healthy_not_unknown() {
        let v = assess(&[bsl("a", A, true)]);
        assert_eq!(v.level, Level::Info);
        assert_eq!(
            v.message,
            "BackupStorageLocations healthy (1 available, 0 unavailable, 0 not yet checked); default velero/a"
        );
    }

    #[test]
    fn pending_checks_are_not_an_error() {
        let v = assess(&[bsl("a", None, true), bsl("b", Some(Phase::Unknown), false)]);
        assert_eq!(v.level, Level::Info);
        assert_eq!(v.counts.unknown, 2);
        let v = assess(&[bsl("a", None, true), bsl("b", U, false)]);
        assert_eq!(v.level, Level::Warn);
    }
}

/// The server status users asked Velero for (issues 2488, 979): one word for the whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerState {
    /// Every BSL is available, and exactly one default exists and is available.
    Ready,
    /// Backups can run somewhere, but a BSL is unavailable or unchecked, or the default is
    /// missing, doubled or unavailable.
    Degraded,
    /// No BSL, or none available: no backup can run.
    NotReady,
}

impl ServerState {
    /// For scripts: 0 Ready, 1 Degraded, 2 NotReady.
    pub fn exit_code(self) -> u8 {
        match self {
            ServerState::Ready => 0,
            ServerState::Degraded => 1,
            ServerState::NotReady => 2,
        }
    }
}

pub fn server_state(bsls: &[BslState]) -> ServerState {
    let available = |b: &&BslState| b.phase == Some(Phase::Available);
    if !bsls.iter().any(|b| available(&b)) {
        return ServerState::NotReady;
    }
    let defaults: Vec<&BslState> = bsls.iter().filter(|b| b.default).collect();
    let all_available = bsls.iter().all(|b| available(&b));
    match defaults.as_slice() {
        [one] if all_available && available(one) => ServerState::Ready,
        _ => ServerState::Degraded,
    }
}

#[cfg(test)]
mod server_state_tests {
    use super::*;

    fn bsl(phase: Option<Phase>, default: bool) -> BslState {
        BslState {
            namespace: "velero".into(),
            name: format!("{phase:?}{default}"),
            phase,
            default,
            message: String::new(),
            last_validation_time: None,
        }
    }

    #[test]
    fn states_follow_the_definitions() {
        let a = Some(Phase::Available);
        let u = Some(Phase::Unavailable);
        assert_eq!(server_state(&[]), ServerState::NotReady);
        assert_eq!(server_state(&[bsl(u, true)]), ServerState::NotReady);
        assert_eq!(server_state(&[bsl(None, true)]), ServerState::NotReady);
        assert_eq!(server_state(&[bsl(a, true)]), ServerState::Ready);
        assert_eq!(
            server_state(&[bsl(a, true), bsl(u, false)]),
            ServerState::Degraded
        );
        assert_eq!(server_state(&[bsl(a, false)]), ServerState::Degraded);
        assert_eq!(
            server_state(&[bsl(a, true), bsl(a, true)]),
            ServerState::Degraded
        );
        assert_eq!(
            server_state(&[bsl(a, false), bsl(u, true)]),
            ServerState::Degraded
        );
        assert_eq!(
            server_state(&[bsl(a, true), bsl(Some(Phase::Unknown), false)]),
            ServerState::Degraded
        );
        assert_eq!(
            [
                ServerState::Ready,
                ServerState::Degraded,
                ServerState::NotReady
            ]
            .map(ServerState::exit_code),
            [0, 1, 2]
        );
    }
}
