//! Metrics of training–serving consistency: the audit's outcomes, the online store's
//! freshness, what serving answered (coverage) and the log of served features.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};

use super::PipelineLabels;

/// Labels of the audit's entity counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditOutcomeLabels {
    /// Pipeline name.
    pub pipeline: String,
    /// `equal`, `online_ahead`, `table_ahead`, `skew`, `missing_online`, `expired_online`,
    /// `missing_offline`.
    pub outcome: &'static str,
}

/// Labels of per-feature audit figures.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditFeatureLabels {
    /// Pipeline name.
    pub pipeline: String,
    /// Feature name.
    pub feature: String,
}

/// Labels of audit runs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditRunLabels {
    /// Pipeline name.
    pub pipeline: String,
    /// `clean` (no defect), `defects`, or `failed` (a store could not be read).
    pub result: &'static str,
}

/// Labels of served rows.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServedRowLabels {
    /// Feature view.
    pub view: String,
    /// `PRESENT`, `NOT_FOUND` or `OUTSIDE_MAX_AGE`, as Feast's answer says.
    pub status: &'static str,
}

/// Labels of the feature log's rows.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FeatureLogLabels {
    /// Feature view.
    pub view: String,
    /// `logged` (committed to the log table) or `dropped` (the log could not keep up).
    pub outcome: &'static str,
}

/// A gauge holding a float.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Every consistency metric; part of [`super::Metrics`].
#[derive(Default)]
pub struct ConsistencyMetrics {
    /// Entities of the last audit, by outcome.
    pub audit_entities: Family<AuditOutcomeLabels, Gauge>,
    /// Entities of the last audit in a defect class (table ahead, skew, missing online).
    pub audit_defect_entities: Family<PipelineLabels, Gauge>,
    /// Per feature, the share of entities compared at the same event time whose values differ.
    pub audit_feature_mismatch_ratio: Family<AuditFeatureLabels, FloatGauge>,
    /// Per numeric feature, the symmetric mean absolute percentage error (0–2) of those pairs.
    pub audit_feature_smape: Family<AuditFeatureLabels, FloatGauge>,
    /// Largest lag of the table behind the online store among the last audit's entities.
    pub audit_table_lag_seconds: Family<PipelineLabels, FloatGauge>,
    /// Audit runs, by result.
    pub audit_runs: Family<AuditRunLabels, Counter>,
    /// When the last audit finished (epoch seconds).
    pub audit_last_run_timestamp_seconds: Family<PipelineLabels, FloatGauge>,
    /// How long the last audit took.
    pub audit_duration_seconds: Family<PipelineLabels, FloatGauge>,
    /// Newest event time the online store acknowledged (epoch seconds).
    pub online_newest_event_time_seconds: Family<PipelineLabels, FloatGauge>,
    /// Age of the newest event the pipeline processed, at scrape time.
    pub newest_event_age_seconds: Family<PipelineLabels, FloatGauge>,
    /// Entity rows answered by `/get-online-features`, by view and status.
    pub serving_rows: Family<ServedRowLabels, Counter>,
    /// Served rows offered to the feature log, by outcome.
    pub feature_log_rows: Family<FeatureLogLabels, Counter>,
}

impl ConsistencyMetrics {
    /// Registers every consistency metric in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "audit_entities",
            "Entities of the last online/offline audit, by outcome",
            metrics.audit_entities.clone(),
        );
        registry.register(
            "audit_defect_entities",
            "Entities of the last audit in a defect class (table_ahead, skew, missing_online)",
            metrics.audit_defect_entities.clone(),
        );
        registry.register(
            "audit_feature_mismatch_ratio",
            "Per feature, share of entities compared at the same event time whose values differ",
            metrics.audit_feature_mismatch_ratio.clone(),
        );
        registry.register(
            "audit_feature_smape",
            "Per numeric feature, symmetric mean absolute percentage error (0 to 2) online vs offline",
            metrics.audit_feature_smape.clone(),
        );
        registry.register(
            "audit_table_lag_seconds",
            "Largest lag of the offline table behind the online store in the last audit",
            metrics.audit_table_lag_seconds.clone(),
        );
        registry.register(
            "audit_runs",
            "Online/offline audits run, by result (clean, defects, failed)",
            metrics.audit_runs.clone(),
        );
        registry.register(
            "audit_last_run_timestamp_seconds",
            "When the last audit finished, epoch seconds",
            metrics.audit_last_run_timestamp_seconds.clone(),
        );
        registry.register(
            "audit_duration_seconds",
            "How long the last audit took",
            metrics.audit_duration_seconds.clone(),
        );
        registry.register(
            "online_newest_event_time_seconds",
            "Newest event time the online store acknowledged, epoch seconds",
            metrics.online_newest_event_time_seconds.clone(),
        );
        registry.register(
            "newest_event_age_seconds",
            "Age of the newest event the pipeline processed, at scrape time",
            metrics.newest_event_age_seconds.clone(),
        );
        registry.register(
            "serving_rows",
            "Entity rows answered by /get-online-features, by view and status",
            metrics.serving_rows.clone(),
        );
        registry.register(
            "feature_log_rows",
            "Served rows offered to the feature log, by outcome (logged, dropped)",
            metrics.feature_log_rows.clone(),
        );
        metrics
    }

    /// The online store of `pipeline` acknowledged events up to `newest_event_ms` (epoch
    /// ms): `online_newest_event_time_seconds` moves forward to it, never back.
    pub fn online_acknowledged(&self, pipeline: &str, newest_event_ms: i64) {
        let labels = PipelineLabels {
            pipeline: pipeline.to_string(),
        };
        raise(
            &self.online_newest_event_time_seconds.get_or_create(&labels),
            newest_event_ms as f64 / 1000.0,
        );
    }

    /// Counts `rows` entity rows of `view` answered with `status` (none: nothing counted).
    pub fn served(&self, view: &str, status: &'static str, rows: u64) {
        if rows == 0 {
            return;
        }
        self.serving_rows
            .get_or_create(&ServedRowLabels {
                view: view.to_string(),
                status,
            })
            .inc_by(rows);
    }
}

/// Sets `gauge` to `value` unless it holds more already: a gauge that only moves forward,
/// whichever of several writers gets there first.
pub fn raise(gauge: &FloatGauge, value: f64) {
    // `None` (already as high) leaves the gauge as it is: nothing to report.
    let _unchanged = gauge
        .inner()
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            (value > f64::from_bits(bits)).then_some(value.to_bits())
        });
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;

    #[test]
    fn the_online_newest_event_time_only_moves_forward() {
        let metrics = Metrics::new();
        let consistency = &metrics.consistency;
        consistency.online_acknowledged("p", 1_791_000_000_500);
        consistency.online_acknowledged("p", 1_790_000_000_000);
        consistency.online_acknowledged("q", 1_000);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"feature_connector_online_newest_event_time_seconds{pipeline="p"} 1791000000.5"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"feature_connector_online_newest_event_time_seconds{pipeline="q"} 1.0"#
            ),
            "{text}"
        );
    }

    #[test]
    fn served_rows_are_counted_by_view_and_status_and_zero_adds_no_series() {
        let metrics = Metrics::new();
        metrics.consistency.served("users", "PRESENT", 3);
        metrics.consistency.served("users", "PRESENT", 2);
        metrics.consistency.served("users", "NOT_FOUND", 0);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"feature_connector_serving_rows_total{view="users",status="PRESENT"} 5"#
            ),
            "{text}"
        );
        assert!(!text.contains("NOT_FOUND"), "{text}");
    }
}
