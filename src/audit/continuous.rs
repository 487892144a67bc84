//! The audit inside `run`: every `audit.interval`, each pipeline with both stores is
//! audited on a sample of `audit.sample` entities within `audit.window`, one pipeline after
//! the other (an audit reads files; two at once would take more CPU from ingest), and the
//! outcome goes to the `audit_*` gauges.
//!
//! Each pipeline's audit keeps what it learnt of the table between runs: the sample, the
//! newest row of each sampled entity and the data files already read. A run reads only the
//! files committed since the previous one (a compaction's rewritten files too, whose rows
//! change nothing), and within them decodes whole only the rows of sampled entities; so its
//! cost follows what was ingested since, not the window.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::offline::read_recent;
use super::sample::Sampler;
use super::{
    compare_with_online, AuditConfig, AuditError, AuditReport, AuditTarget, EntityKey, OfflineRow,
    Outcome, Selection, TableRead,
};
use crate::delta::Table;
use crate::metrics::{
    AuditFeatureLabels, AuditOutcomeLabels, AuditRunLabels, Metrics, PipelineLabels,
};
use crate::record::entity_hash;

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
    let mut audits: Vec<RunningAudit> = targets
        .into_iter()
        .map(|target| RunningAudit::new(target, config.sample, window_ms))
        .collect();
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
        for running in &mut audits {
            let pipeline = running.target.pipeline.clone();
            let span = tracing::info_span!("audit", pipeline = %pipeline);
            let outcome = tokio::select! {
                () = cancel.cancelled() => return,
                outcome = running.run().instrument(span) => outcome,
            };
            match outcome {
                Ok(report) => publish(&metrics, &report),
                Err(e) => {
                    metrics
                        .consistency
                        .audit_runs
                        .get_or_create(&AuditRunLabels {
                            pipeline: pipeline.clone(),
                            result: "failed",
                        })
                        .inc();
                    running.reset();
                    tracing::warn!(pipeline = %pipeline, error = %e, "audit could not read a store; trying again at the next interval");
                }
            }
        }
    }
}

/// One pipeline's audit with what it keeps between runs.
struct RunningAudit {
    target: AuditTarget,
    sample: usize,
    window_ms: i64,
    sampler: Sampler,
    /// The newest row of each sampled entity, from the files read so far.
    rows: HashMap<EntityKey, OfflineRow>,
    /// The data files already read (paths relative to the table).
    seen: HashSet<String>,
}

impl RunningAudit {
    fn new(target: AuditTarget, sample: usize, window_ms: i64) -> Self {
        Self {
            target,
            sample,
            window_ms,
            sampler: Sampler::new(Selection::Sample(sample)),
            rows: HashMap::new(),
            seen: HashSet::new(),
        }
    }

    /// Forgets what was learnt (after a failed run, whose reads may be partial).
    fn reset(&mut self) {
        *self = Self::new(self.target.clone(), self.sample, self.window_ms);
    }

    async fn run(&mut self) -> Result<AuditReport, AuditError> {
        let started = Instant::now();
        let audited_at_ms = chrono::Utc::now().timestamp_millis();
        let since = audited_at_ms.saturating_sub(self.window_ms);
        let table = Table::open_existing(self.target.table.clone()).await?;
        let files = table.active_files().await?;
        let current: HashSet<String> = files.iter().map(|f| f.path.clone()).collect();
        let mut read = TableRead {
            version: table.version(),
            ..TableRead::default()
        };
        let new = files
            .into_iter()
            .filter(|file| !self.seen.contains(&file.path))
            .collect();
        read_recent(
            &table,
            new,
            &self.target.layout,
            &mut self.sampler,
            Some(since),
            &mut self.rows,
            &mut read,
        )
        .await?;
        self.seen = current;
        let aged: Vec<EntityKey> = self
            .rows
            .iter()
            .filter(|(_, row)| row.event_time_ms < since)
            .map(|(key, _)| key.clone())
            .collect();
        for key in aged {
            self.rows.remove(&key);
            self.sampler.forget(&key, entity_hash(&key));
        }
        let (report, online_only) = compare_with_online(
            &self.target,
            &mut self.sampler,
            &mut self.rows,
            read,
            Some(since),
            audited_at_ms,
            started,
        )
        .await?;
        // Found again by the next run's scan; meanwhile they hold no place in the sample.
        for key in online_only {
            self.sampler.forget(&key, entity_hash(&key));
        }
        Ok(report)
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
