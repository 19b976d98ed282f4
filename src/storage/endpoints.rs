//! Storage endpoints as the checks share them: a bounded number of checks at once (turns), the
//! sockets ([`Lanes`]), and a circuit breaker that recognises an endpoint that does not answer
//! once, not once per BSL.
//!
//! A BSL whose endpoint has no free turn does not wait for one: it joins the endpoint's line
//! (a name in a queue) and its reconcile ends, holding nothing. When a turn is free again it is
//! granted to the first in line, whose name is handed to the reconciler ([`Wakeups`]) to be
//! checked. So a busy or silent endpoint delays only its own BSLs, in order, and the
//! reconciler's slots only ever hold checks that are running.
//!
//! When a check of an endpoint times out, the endpoint is down: the other BSLs on it get their
//! verdict at once (Unavailable, naming the endpoint and how many BSLs share it), and one check
//! per period probes it. When an answer comes back, the BSLs that were told it was down are
//! handed back for a real check each.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::connections::Lanes;

/// How often a down endpoint is probed when the check that found it has no period (a BSL
/// checked only once).
const DEFAULT_REPROBE: Duration = Duration::from_secs(60);

/// A granted turn not taken within this long (its BSL was deleted, or found not due) goes to
/// the next in line.
const GRANT_TTL: Duration = Duration::from_secs(30);

/// BSLs ("namespace/name") the reconciler is to check now: granted a turn, or on an endpoint
/// that answers again.
#[derive(Default)]
pub struct Wakeups {
    queued: Mutex<Vec<String>>,
    notify: tokio::sync::Notify,
}

impl Wakeups {
    pub fn add(&self, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        lock(&self.queued).extend(ids);
        self.notify.notify_one();
    }

    /// Waits for some.
    pub async fn next(&self) -> Vec<String> {
        loop {
            let ids = std::mem::take(&mut *lock(&self.queued));
            if !ids.is_empty() {
                return ids;
            }
            self.notify.notified().await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where a check stands at its endpoint.
pub enum Place {
    Turn(Turn),
    /// In line: the BSL is woken when a turn is granted to it.
    InLine,
    /// The endpoint is down: this is the BSL's verdict.
    Down(String),
}

/// One storage endpoint: its turns, its sockets and whether it answers.
pub struct Endpoint {
    pub key: String,
    turns: Arc<Semaphore>,
    pub lanes: Arc<Lanes>,
    state: Mutex<State>,
    wakeups: Arc<Wakeups>,
}

#[derive(Default)]
struct State {
    /// The BSLs whose checks go here, for the message that says how many share it.
    members: HashSet<String>,
    down: Option<Down>,
    /// BSLs waiting for a turn, first come first served.
    line: VecDeque<String>,
    in_line: HashSet<String>,
    /// Turns given to BSLs in line, until their reconcile takes them.
    granted: HashMap<String, (OwnedSemaphorePermit, Instant)>,
}

/// An endpoint that did not answer a check.
#[derive(Clone, Debug)]
struct Down {
    since: Timestamp,
    /// What the check that found it said, e.g. "timed out after 10s connecting to ...".
    cause: String,
    period: Duration,
    next_probe: Instant,
    probing: bool,
    /// BSLs given the endpoint's verdict instead of a check; checked again when it answers.
    told: HashSet<String>,
}

/// What a check may do at an endpoint.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Check,
    /// The endpoint is down and this check is the one that probes it.
    Probe,
    /// The endpoint is down: this is the BSL's verdict.
    Down(String),
}

/// Whether a check reached the endpoint, as far as the breaker cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contact {
    /// Something came back (a listing, an HTTP error, a refused connection).
    Answered,
    /// Nothing came back before the check's timeout.
    Silent,
    /// The check never got to the network (a spec or credentials problem).
    None,
}

impl Endpoint {
    pub fn new(key: &str, limit: usize, wakeups: Arc<Wakeups>) -> Arc<Endpoint> {
        Arc::new(Endpoint {
            key: key.to_string(),
            turns: Arc::new(Semaphore::new(limit.max(1))),
            lanes: Lanes::new(limit),
            state: Mutex::default(),
            wakeups,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A turn now, a place in line, or the endpoint's verdict; never waits. `id` is woken
    /// through the [`Wakeups`] when a turn is granted to it.
    pub fn place(self: &Arc<Self>, id: &str) -> Place {
        let now = Instant::now();
        let mut state = self.state();
        // Turns granted long ago and never taken go to the next in line.
        let stale: Vec<String> = state
            .granted
            .iter()
            .filter(|(_, (_, at))| now.duration_since(*at) > GRANT_TTL)
            .map(|(id, _)| id.clone())
            .collect();
        for stale in &stale {
            state.granted.remove(stale);
        }
        let members = state.members.len();
        // Before a turn, a check that could probe only goes on to get one.
        if let Admission::Down(verdict) = admit(&mut state.down, &self.key, id, members, now, false)
        {
            // A turn granted to it goes on to the next in line.
            state.granted.remove(id);
            self.leave_line(&mut state, id);
            self.dispatch(state);
            return Place::Down(verdict);
        }
        let permit = match state.granted.remove(id) {
            Some((permit, _)) => Some(permit),
            None if state.line.is_empty() => self.turns.clone().try_acquire_owned().ok(),
            None => None,
        };
        let Some(permit) = permit else {
            if state.in_line.insert(id.to_string()) {
                state.line.push_back(id.to_string());
            }
            self.dispatch(state);
            return Place::InLine;
        };
        self.leave_line(&mut state, id);
        match admit(&mut state.down, &self.key, id, members, now, true) {
            Admission::Down(verdict) => {
                drop(permit);
                self.dispatch(state);
                Place::Down(verdict)
            }
            admission => Place::Turn(Turn {
                endpoint: self.clone(),
                permit: Some(permit),
                probing: admission == Admission::Probe,
                reported: false,
            }),
        }
    }

    /// Whether BSLs wait in its line or hold turns granted to them.
    pub fn has_line(&self) -> bool {
        let state = self.state();
        !state.line.is_empty() || !state.granted.is_empty()
    }

    fn leave_line(&self, state: &mut State, id: &str) {
        if state.in_line.remove(id) {
            state.line.retain(|queued| queued != id);
        }
    }

    /// Grants free turns to the first in line and wakes them.
    fn dispatch(&self, mut state: MutexGuard<'_, State>) {
        let now = Instant::now();
        let mut woken = Vec::new();
        while !state.line.is_empty() {
            let Ok(permit) = self.turns.clone().try_acquire_owned() else {
                break;
            };
            let Some(id) = state.line.pop_front() else {
                break;
            };
            state.in_line.remove(&id);
            state.granted.insert(id.clone(), (permit, now));
            woken.push(id);
        }
        drop(state);
        self.wakeups.add(woken);
    }

    /// The BSL will not take a turn granted to it (it is not due, or gone).
    pub fn decline(&self, id: &str) {
        let mut state = self.state();
        state.granted.remove(id);
        self.leave_line(&mut state, id);
        self.dispatch(state);
    }

    pub fn join(&self, id: &str) {
        let mut state = self.state();
        if !id.is_empty() && !state.members.contains(id) {
            state.members.insert(id.to_string());
        }
    }

    pub fn leave(&self, id: &str) {
        let mut state = self.state();
        state.members.remove(id);
        if let Some(down) = &mut state.down {
            down.told.remove(id);
        }
        state.granted.remove(id);
        self.leave_line(&mut state, id);
        self.dispatch(state);
    }

    /// Waits for a turn, for a caller with no reconciler to wake it (a one-off check); the
    /// endpoint's verdict instead when it is down.
    pub async fn wait(self: &Arc<Self>) -> Result<Turn, String> {
        // The semaphore is never closed.
        let Ok(permit) = self.turns.clone().acquire_owned().await else {
            return Err("the endpoint's turns are closed".into());
        };
        let mut state = self.state();
        let members = state.members.len();
        match admit(
            &mut state.down,
            &self.key,
            "",
            members,
            Instant::now(),
            true,
        ) {
            Admission::Down(verdict) => Err(verdict),
            admission => Ok(Turn {
                endpoint: self.clone(),
                permit: Some(permit),
                probing: admission == Admission::Probe,
                reported: false,
            }),
        }
    }
}

/// One check's turn at an endpoint: one of its `limit` checks at once.
pub struct Turn {
    endpoint: Arc<Endpoint>,
    permit: Option<OwnedSemaphorePermit>,
    probing: bool,
    reported: bool,
}

impl Turn {
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }

    /// Tells the breaker how the check went; returns the BSLs to check again now (the endpoint
    /// answered after being down). `cause` describes a silent check; `period` is how often
    /// the BSL is checked.
    pub fn report(mut self, contact: Contact, cause: &str, period: Duration) -> Vec<String> {
        self.reported = true;
        let mut state = self.endpoint.state();
        let now = (Instant::now(), Timestamp::now());
        report(&mut state.down, contact, self.probing, cause, period, now)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut state = self.endpoint.state();
        // A probe that never reported (the reconciler stopped, or nothing reached the network)
        // leaves the next check to probe.
        if self.probing
            && !self.reported
            && let Some(down) = &mut state.down
        {
            down.probing = false;
        }
        self.endpoint.dispatch(state);
    }
}

/// `may_probe`: whether this check takes the probe's role when one is due (otherwise it is
/// only let through to wait for its turn).
fn admit(
    down: &mut Option<Down>,
    key: &str,
    id: &str,
    members: usize,
    now: Instant,
    may_probe: bool,
) -> Admission {
    let Some(d) = down else {
        return Admission::Check;
    };
    if !d.probing && now >= d.next_probe {
        if !may_probe {
            return Admission::Check;
        }
        d.probing = true;
        return Admission::Probe;
    }
    if !id.is_empty() {
        d.told.insert(id.to_string());
    }
    let share = match members {
        0 | 1 => String::new(),
        n => format!("; {n} BSLs use this endpoint"),
    };
    Admission::Down(format!(
        "not checked: {key} did not answer a check at {} ({}){share}; it is probed with one \
         check every {} until it answers",
        d.since.strftime("%Y-%m-%dT%H:%M:%SZ"),
        d.cause,
        crate::duration::GoDuration::from_std(d.period),
    ))
}

fn report(
    down: &mut Option<Down>,
    contact: Contact,
    probing: bool,
    cause: &str,
    period: Duration,
    (now, wall): (Instant, Timestamp),
) -> Vec<String> {
    let period = if period.is_zero() {
        DEFAULT_REPROBE
    } else {
        period
    };
    match (contact, down.as_mut()) {
        (Contact::Silent, None) => {
            *down = Some(Down {
                since: wall,
                cause: cause.to_string(),
                period,
                next_probe: now + period,
                probing: false,
                told: HashSet::new(),
            });
            Vec::new()
        }
        (Contact::Silent, Some(d)) => {
            // A check that began before the endpoint was found down says nothing new.
            if probing {
                d.probing = false;
                d.since = wall;
                d.cause = cause.to_string();
                d.period = period;
                d.next_probe = now + period;
            }
            Vec::new()
        }
        (Contact::Answered, Some(_)) => down
            .take()
            .map(|d| d.told.into_iter().collect())
            .unwrap_or_default(),
        (Contact::None, Some(d)) => {
            if probing {
                d.probing = false;
            }
            Vec::new()
        }
        (Contact::Answered | Contact::None, None) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(60);

    fn wall() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap_or_default()
    }

    fn tripped(now: Instant) -> Option<Down> {
        let mut down = None;
        report(
            &mut down,
            Contact::Silent,
            false,
            "timed out after 10s waiting for the first byte",
            PERIOD,
            (now, wall()),
        );
        down
    }

    fn woken(wakeups: &Wakeups) -> Vec<String> {
        std::mem::take(&mut *lock(&wakeups.queued))
    }

    #[test]
    fn a_busy_endpoint_puts_bsls_in_line_and_grants_turns_in_order() {
        let wakeups = Arc::new(Wakeups::default());
        let endpoint = Endpoint::new("http://s3", 1, wakeups.clone());
        let Place::Turn(first) = endpoint.place("ns/a") else {
            panic!("a free endpoint gives a turn");
        };
        assert!(matches!(endpoint.place("ns/b"), Place::InLine));
        assert!(matches!(endpoint.place("ns/c"), Place::InLine));
        assert!(
            matches!(endpoint.place("ns/b"), Place::InLine),
            "once in line"
        );
        assert!(woken(&wakeups).is_empty());
        drop(first);
        assert_eq!(
            woken(&wakeups),
            ["ns/b"],
            "the first in line is granted the turn"
        );
        // A newcomer does not jump the line, even though a turn is held for b.
        assert!(matches!(endpoint.place("ns/d"), Place::InLine));
        let Place::Turn(second) = endpoint.place("ns/b") else {
            panic!("b takes the turn granted to it");
        };
        drop(second);
        assert_eq!(woken(&wakeups), ["ns/c"]);
        // c is no longer due: its turn goes on to d.
        endpoint.decline("ns/c");
        assert_eq!(woken(&wakeups), ["ns/d"]);
        endpoint.leave("ns/d");
        assert!(
            matches!(endpoint.place("ns/e"), Place::Turn(_)),
            "d's turn came back"
        );
    }

    #[test]
    fn a_bsl_in_line_told_the_endpoint_is_down_gives_its_turn_back() {
        let wakeups = Arc::new(Wakeups::default());
        let endpoint = Endpoint::new("http://silent", 1, wakeups.clone());
        let Place::Turn(first) = endpoint.place("ns/a") else {
            panic!("a free endpoint gives a turn");
        };
        assert!(matches!(endpoint.place("ns/b"), Place::InLine));
        first.report(Contact::Silent, "timed out", PERIOD);
        assert_eq!(woken(&wakeups), ["ns/b"]);
        assert!(matches!(endpoint.place("ns/b"), Place::Down(_)));
        assert_eq!(endpoint.turns.available_permits(), 1, "no turn kept for b");
    }

    #[test]
    fn an_answering_endpoint_is_checked() {
        let mut down = None;
        assert_eq!(
            admit(&mut down, "http://s3", "ns/a", 3, Instant::now(), true),
            Admission::Check
        );
        assert!(
            report(
                &mut down,
                Contact::Answered,
                false,
                "",
                PERIOD,
                (Instant::now(), wall())
            )
            .is_empty()
        );
        assert!(down.is_none());
    }

    #[test]
    fn a_silent_check_gives_every_other_bsl_its_verdict_at_once() {
        let now = Instant::now();
        let mut down = tripped(now);
        let Admission::Down(message) =
            admit(&mut down, "http://10.0.0.9:9000", "ns/b", 100, now, true)
        else {
            panic!("expected the endpoint's verdict");
        };
        assert_eq!(
            message,
            "not checked: http://10.0.0.9:9000 did not answer a check at 2027-01-15T08:00:00Z \
             (timed out after 10s waiting for the first byte); 100 BSLs use this endpoint; it is \
             probed with one check every 1m0s until it answers"
        );
    }

    #[test]
    fn one_check_per_period_probes_a_down_endpoint() {
        let now = Instant::now();
        let mut down = tripped(now);
        let later = now + PERIOD;
        assert_eq!(
            admit(&mut down, "e", "ns/a", 2, later, true),
            Admission::Probe
        );
        // While the probe runs, the others keep getting the verdict.
        assert!(matches!(
            admit(&mut down, "e", "ns/b", 2, later, true),
            Admission::Down(_)
        ));
        // The probe times out again: the next probe is a period away.
        let again = later + Duration::from_secs(10);
        report(
            &mut down,
            Contact::Silent,
            true,
            "timed out",
            PERIOD,
            (again, wall()),
        );
        assert!(matches!(
            admit(&mut down, "e", "ns/b", 2, again, true),
            Admission::Down(_)
        ));
        assert_eq!(
            admit(&mut down, "e", "ns/b", 2, again + PERIOD, true),
            Admission::Probe
        );
    }

    #[test]
    fn an_answer_closes_the_breaker_and_hands_back_the_bsls_told() {
        let now = Instant::now();
        let mut down = tripped(now);
        for id in ["ns/a", "ns/b", "ns/b"] {
            assert!(matches!(
                admit(&mut down, "e", id, 2, now, true),
                Admission::Down(_)
            ));
        }
        assert_eq!(
            admit(&mut down, "e", "ns/c", 3, now + PERIOD, true),
            Admission::Probe
        );
        let mut again = report(
            &mut down,
            Contact::Answered,
            true,
            "",
            PERIOD,
            (now, wall()),
        );
        again.sort();
        assert_eq!(again, ["ns/a", "ns/b"]);
        assert!(down.is_none());
        assert_eq!(
            admit(&mut down, "e", "ns/a", 3, now, true),
            Admission::Check
        );
    }

    #[test]
    fn a_check_waiting_for_its_turn_probes_only_once_it_has_it() {
        let now = Instant::now();
        let mut down = tripped(now);
        let due = now + PERIOD;
        assert_eq!(
            admit(&mut down, "e", "ns/a", 1, due, false),
            Admission::Check
        );
        assert_eq!(
            admit(&mut down, "e", "ns/a", 1, due, true),
            Admission::Probe
        );
    }

    #[test]
    fn a_probe_that_never_reached_the_network_leaves_the_next_check_to_probe() {
        let now = Instant::now();
        let mut down = tripped(now);
        assert_eq!(
            admit(&mut down, "e", "ns/a", 1, now + PERIOD, true),
            Admission::Probe
        );
        report(&mut down, Contact::None, true, "", PERIOD, (now, wall()));
        assert_eq!(
            admit(&mut down, "e", "ns/b", 1, now + PERIOD, true),
            Admission::Probe
        );
    }

    #[test]
    fn a_check_once_bsl_still_gets_its_endpoint_probed() {
        let now = Instant::now();
        let mut down = None;
        report(
            &mut down,
            Contact::Silent,
            false,
            "t",
            Duration::ZERO,
            (now, wall()),
        );
        assert!(matches!(
            admit(&mut down, "e", "ns/a", 1, now, true),
            Admission::Down(_)
        ));
        assert_eq!(
            admit(&mut down, "e", "ns/a", 1, now + DEFAULT_REPROBE, true),
            Admission::Probe
        );
    }
}
