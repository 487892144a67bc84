//! The audit inside `run`: every `audit.interval`, each pipeline with both stores is
//! audited on a sample of `audit.sample` entities within `audit.window`, one pipeline after
//! the other (an audit reads files; two at once would take more CPU from ingest), and the
//! outcome goes to the `audit_*` gauges.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{audit, AuditConfig, AuditReport, AuditTarget, Outcome, Selection};
use crate::metrics::{
    AuditFeatureLabels, AuditOutcomeLabels, AuditRunLabels, Metrics, PipelineLabels,
};

/// Audits `targets` every `config.interval` until `cancel` fires.
pub async fn run(
    config: AuditConfig,
    targets: Vec<AuditTarget>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    if targets.is_empty() {
        return;
    }
    let window_ms = i64::try_from(config.window.as_millis()).unwrap_or(i64::MAX);
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + config.interval,
        config.interval.max(Duration::from_secs(1)),
    );
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        for target in &targets {
            let since = chrono::Utc::now()
                .timestamp_millis()
                .saturating_sub(window_ms);
            let span = tracing::info_span!("audit", pipeline = %target.pipeline);
            let outcome = tokio::select! {
                () = cancel.cancelled() => return,
                outcome = audit(target, Selection::Sample(config.sample), Some(since)).instrument(span) => outcome,
            };
            match outcome {
                Ok(report) => publish(&metrics, &report),
                Err(e) => {
                    metrics
                        .consistency
                        .audit_runs
                        .get_or_create(&AuditRunLabels {
                            pipeline: target.pipeline.clone(),
                            result: "failed",
                        })
                        .inc();
                    tracing::warn!(pipeline = %target.pipeline, error = %e, "audit could not read a store; trying again at the next interval");
                }
            }
        }
    }
}

/// Puts `report` into the audit gauges and logs its result.
pub fn publish(metrics: &Metrics, report: &AuditReport) {
    let consistency = &metrics.consistency;
    let pipeline = PipelineLabels {
        pipeline: report.pipeline.clone(),
    };
    for outcome in Outcome::ALL {
        if outcome == Outcome::Absent {
            continue;
        }
        let count = report.outcomes.get(outcome.name()).copied().unwrap_or(0);
        consistency
            .audit_entities
            .get_or_create(&AuditOutcomeLabels {
                pipeline: report.pipeline.clone(),
                outcome: outcome.name(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    consistency
        .audit_defect_entities
        .get_or_create(&pipeline)
        .set(i64::try_from(report.defects).unwrap_or(i64::MAX));
    for feature in &report.features {
        let labels = AuditFeatureLabels {
            pipeline: report.pipeline.clone(),
            feature: feature.feature.clone(),
        };
        consistency
            .audit_feature_mismatch_ratio
            .get_or_create(&labels)
            .set(feature.mismatch_ratio);
        if let Some(smape) = feature.smape {
            consistency
                .audit_feature_smape
                .get_or_create(&labels)
                .set(smape);
        }
    }
    consistency
        .audit_table_lag_seconds
        .get_or_create(&pipeline)
        .set(report.lag.as_ref().map_or(0.0, |lag| lag.max_seconds));
    consistency
        .audit_last_run_timestamp_seconds
        .get_or_create(&pipeline)
        .set(report.audited_at_ms as f64 / 1000.0);
    consistency
        .audit_duration_seconds
        .get_or_create(&pipeline)
        .set(report.seconds);
    consistency
        .audit_runs
        .get_or_create(&AuditRunLabels {
            pipeline: report.pipeline.clone(),
            result: if report.defects == 0 {
                "clean"
            } else {
                "defects"
            },
        })
        .inc();
    if report.defects > 0 {
        tracing::warn!(
            pipeline = %report.pipeline,
            defects = report.defects,
            table_ahead = report.outcomes.get("table_ahead").copied().unwrap_or(0),
            skew = report.outcomes.get("skew").copied().unwrap_or(0),
            missing_online = report.outcomes.get("missing_online").copied().unwrap_or(0),
            "audit found entities whose online and offline values disagree; see docs/consistency.md"
        );
    } else {
        tracing::info!(
            pipeline = %report.pipeline,
            entities = report.entities,
            seconds = report.seconds,
            "audit found no defect"
        );
    }
}
