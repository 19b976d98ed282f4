//! Another validator writing the same status: Velero's own BSL controller, left on beside
//! bsl-sentinel (README, "Beside a Velero server"). Two writers overwrite each other's
//! message and time on every round, so an operator must learn that two are running.

use jiff::Timestamp;

use crate::bsl::{Phase, StoredStatus};

/// What this replica last wrote to one BSL's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Written<'a> {
    /// lastValidationTime as written; None for an unchecked BSL, whose write sets no time.
    pub time: Option<&'a str>,
    pub phase: Option<Phase>,
    pub message: &'a str,
}

/// Whether `seen` was written by someone else after `ours`: a later lastValidationTime, or
/// the same one with another phase or message. An older status is the watch catching up
/// with our own write, not another writer.
pub(super) fn another_writer(ours: &Written, seen: &StoredStatus) -> bool {
    let (Some(ours_text), Some(seen_text)) = (ours.time, seen.last_validation_time.as_deref())
    else {
        return false;
    };
    let (Ok(ours_time), Ok(seen_time)) = (
        ours_text.parse::<Timestamp>(),
        seen_text.parse::<Timestamp>(),
    ) else {
        return false;
    };
    match seen_time.cmp(&ours_time) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => {
            seen.phase != ours.phase || seen.message.as_deref().unwrap_or_default() != ours.message
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: Written = Written {
        time: Some("2026-12-03T10:00:00Z"),
        phase: Some(Phase::Unavailable),
        message: "BackupStorageLocation \"b\" is unavailable: cannot connect",
    };

    fn seen(time: Option<&str>, phase: Option<Phase>, message: &str) -> StoredStatus {
        StoredStatus {
            present: true,
            phase,
            last_validation_time: time.map(String::from),
            message: Some(message.to_string()),
        }
    }

    #[test]
    fn our_own_write_seen_back_is_not_another_writer() {
        let status = seen(OURS.time, OURS.phase, OURS.message);
        assert!(!another_writer(&OURS, &status));
    }

    #[test]
    fn an_older_status_is_the_watch_catching_up() {
        let status = seen(Some("2026-12-03T09:59:00Z"), Some(Phase::Available), "");
        assert!(!another_writer(&OURS, &status));
    }

    #[test]
    fn a_later_validation_time_is_another_writer_even_with_the_same_verdict() {
        let status = seen(Some("2026-12-03T10:00:01Z"), OURS.phase, OURS.message);
        assert!(another_writer(&OURS, &status));
    }

    #[test]
    fn the_same_time_with_another_message_or_phase_is_another_writer() {
        let velero = "rpc error: code = Unknown desc = operation error S3: ListObjectsV2";
        assert!(another_writer(&OURS, &seen(OURS.time, OURS.phase, velero)));
        assert!(another_writer(
            &OURS,
            &seen(OURS.time, Some(Phase::Available), OURS.message)
        ));
    }

    #[test]
    fn without_a_time_on_either_side_nothing_can_be_told() {
        let unchecked = Written {
            time: None,
            ..OURS.clone()
        };
        let later = seen(Some("2026-12-03T11:00:00Z"), OURS.phase, "x");
        assert!(!another_writer(&unchecked, &later));
        assert!(!another_writer(&OURS, &seen(None, None, "")));
        assert!(!another_writer(&OURS, &seen(Some("not a time"), None, "")));
    }
}
