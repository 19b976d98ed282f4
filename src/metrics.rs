//! Prometheus metrics, served as OpenMetrics text on the admin port: phase per BSL, check durations,
//! check failures by reason, reconciles by result.

use std::fmt::Write;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::bsl::Phase;
use crate::provider::Provider;
use crate::storage::FailureReason;

/// What prometheus-client's text encoder writes (it ends with `# EOF`).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub namespace: String,
    pub name: String,
    pub phase: Phase,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BslLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    pub provider: CheckedProvider,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: FailureReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: ReconcileResult,
}

/// The provider a check is counted under: one whose plugin bsl-sentinel knows, another
/// plugin, or a spec that could not be read.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CheckedProvider {
    Known(Provider),
    Plugin,
    Unreadable,
}

/// How a reconcile ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReconcileResult {
    Checked,
    NotDue,
    /// Waiting for a turn at a busy endpoint.
    InLine,
    /// The spec changed under the check; its result was not written.
    SpecChanged,
    WriteStatusError,
}

impl EncodeLabelValue for Phase {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for CheckedProvider {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            CheckedProvider::Known(p) => p.plugin_name().trim_start_matches("velero.io/"),
            CheckedProvider::Plugin => "plugin",
            CheckedProvider::Unreadable => "unknown",
        })
    }
}

impl EncodeLabelValue for FailureReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for ReconcileResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            ReconcileResult::Checked => "checked",
            ReconcileResult::NotDue => "not_due",
            ReconcileResult::InLine => "in_line",
            ReconcileResult::SpecChanged => "spec_changed",
            ReconcileResult::WriteStatusError => "write_status_error",
        })
    }
}

pub struct Metrics {
    registry: Registry,
    phase: Family<PhaseLabels, Gauge>,
    default: Family<BslLabels, Gauge>,
    last_validation: Family<BslLabels, Gauge>,
    period: Family<BslLabels, Gauge>,
    check_duration: Family<ProviderLabels, Histogram>,
    check_failures: Family<ReasonLabels, Counter>,
    reconciles: Family<ResultLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("bsl_sentinel");
        let phase = Family::<PhaseLabels, Gauge>::default();
        registry.register(
            "bsl_phase",
            "1 for the phase a BackupStorageLocation is in, else 0",
            phase.clone(),
        );
        // What the alerts on the default BSL and on checks that stopped need.
        let default = Family::<BslLabels, Gauge>::default();
        registry.register(
            "bsl_default",
            "1 for the BackupStorageLocation marked default, else 0",
            default.clone(),
        );
        let last_validation = Family::<BslLabels, Gauge>::default();
        registry.register(
            "bsl_last_validation_timestamp_seconds",
            "When a BackupStorageLocation was last checked (lastValidationTime, Unix seconds)",
            last_validation.clone(),
        );
        let period = Family::<BslLabels, Gauge>::default();
        registry.register(
            "bsl_validation_period_seconds",
            "How often a BackupStorageLocation is checked (0: once and on spec changes)",
            period.clone(),
        );
        let check_duration = Family::<ProviderLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ])
        });
        registry.register(
            "check_duration_seconds",
            "Duration of storage connectivity checks",
            check_duration.clone(),
        );
        let check_failures = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "check_failures",
            "Storage checks that found a location unavailable",
            check_failures.clone(),
        );
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register("reconciles", "Reconciles by result", reconciles.clone());
        Metrics {
            registry,
            phase,
            default,
            last_validation,
            period,
            check_duration,
            check_failures,
            reconciles,
        }
    }
}

impl Metrics {
    pub fn set_phase(&self, namespace: &str, name: &str, phase: Option<Phase>) {
        for candidate in [Phase::Available, Phase::Unavailable, Phase::Unknown] {
            let labels = PhaseLabels {
                namespace: namespace.into(),
                name: name.into(),
                phase: candidate,
            };
            self.phase
                .get_or_create(&labels)
                .set(i64::from(phase == Some(candidate)));
        }
    }

    /// A check of a BSL: whether it is the default, when it ran, and its period.
    pub fn set_checked(
        &self,
        namespace: &str,
        name: &str,
        default: bool,
        at: jiff::Timestamp,
        period: Duration,
    ) {
        let labels = BslLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.default.get_or_create(&labels).set(i64::from(default));
        self.last_validation
            .get_or_create(&labels)
            .set(at.as_second());
        self.period
            .get_or_create(&labels)
            .set(i64::try_from(period.as_secs()).unwrap_or(i64::MAX));
    }

    /// A deleted BSL leaves no series behind.
    pub fn forget(&self, namespace: &str, name: &str) {
        let labels = BslLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.default.remove(&labels);
        self.last_validation.remove(&labels);
        self.period.remove(&labels);
        for candidate in [Phase::Available, Phase::Unavailable, Phase::Unknown] {
            self.phase.remove(&PhaseLabels {
                namespace: namespace.into(),
                name: name.into(),
                phase: candidate,
            });
        }
    }

    pub fn observe_check(&self, provider: CheckedProvider, took: Duration) {
        self.check_duration
            .get_or_create(&ProviderLabels { provider })
            .observe(took.as_secs_f64());
    }

    pub fn count_failure(&self, reason: FailureReason) {
        self.check_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub fn count_reconcile(&self, result: ReconcileResult) {
        self.reconciles
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    pub fn render(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_phase_and_counters() {
        let metrics = Metrics::default();
        metrics.set_phase("velero", "a", Some(Phase::Available));
        metrics.count_failure(FailureReason::Auth);
        metrics.count_reconcile(ReconcileResult::Checked);
        metrics.observe_check(
            CheckedProvider::Known(Provider::Aws),
            Duration::from_millis(20),
        );
        let text = metrics.render();
        assert!(
            text.contains(
                r#"bsl_sentinel_bsl_phase{namespace="velero",name="a",phase="Available"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"bsl_sentinel_bsl_phase{namespace="velero",name="a",phase="Unavailable"} 0"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"bsl_sentinel_check_failures_total{reason="auth"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"bsl_sentinel_reconciles_total{result="checked"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"bsl_sentinel_check_duration_seconds_count{provider="aws"} 1"#),
            "{text}"
        );
        metrics.forget("velero", "a");
        assert!(!metrics.render().contains("name=\"a\""));
    }

    #[test]
    fn a_check_records_default_time_and_period_until_forgotten() {
        let metrics = Metrics::default();
        let at = jiff::Timestamp::from_second(1_800_000_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        metrics.set_checked("velero", "a", true, at, Duration::from_secs(60));
        let text = metrics.render();
        for line in [
            r#"bsl_sentinel_bsl_default{namespace="velero",name="a"} 1"#,
            r#"bsl_sentinel_bsl_last_validation_timestamp_seconds{namespace="velero",name="a"} 1800000000"#,
            r#"bsl_sentinel_bsl_validation_period_seconds{namespace="velero",name="a"} 60"#,
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        metrics.forget("velero", "a");
        assert!(!metrics.render().contains("name=\"a\""));
    }
}
