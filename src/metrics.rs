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

    /// A deleted BSL leaves no series behind.
    pub fn forget(&self, namespace: &str, name: &str) {
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
}
