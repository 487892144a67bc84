//! The offline sink: buffers a rollover's rows, commits them to the pipeline's Delta table as
//! one version, and reports its messages durable only once that version exists.

mod bridge;
mod commit_rollover;
mod gaps;
mod origins;
mod rollover;

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::delta::writer::{RolloverLimits, RolloverWriter};
use crate::delta::{DeltaSinkConfig, Opened, Table, TableError, TableLayout, TableSpec};
use crate::metrics::{Metrics, PipelineLabels};
use crate::record::RowBatch;
use crate::retry::Backoff;
use crate::sink::{Sink, SinkError};
use crate::source::{distinct_streams, MessagePosition, OfflineOrigins, SkippedEntries};
use bridge::GapBridge;
use rollover::Rollover;

/// How long shutdown waits for a checkpoint being written.
const CHECKPOINT_AT_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(10);

/// How long messages after a gap in a partition wait for it to fill before the gap is taken as
/// real (Pulsar's Failover rewind comes within a second; expired messages never do).
pub(super) const GAP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// A rollover that cannot be cut into files (a bug, not a service failure).
fn fatal(error: arrow::error::ArrowError) -> SinkError {
    SinkError::fatal_from("offline rollover", error)
}

/// Writes a pipeline's rows to its Delta table (see the module docs of [`super`]).
pub struct DeltaSink {
    pub(super) spec: TableSpec,
    pub(super) config: DeltaSinkConfig,
    pub(super) table: Option<Table>,
    pub(super) layout: Option<TableLayout>,
    pub(super) rollover: Rollover,
    /// Commits rollovers, keeping the files of an attempt that did not land.
    pub(super) writer: RolloverWriter,
    /// Whether the log may hold commits the sink has not read (after a conflict, a failed
    /// commit, or while messages wait behind a gap).
    pub(super) stale: bool,
    pub(super) gap_grace: std::time::Duration,
    /// The gaps the source skipped itself (committed past at once).
    pub(super) bridge: GapBridge,
    /// Encoded bytes per in-memory Arrow byte, learned from the last commit.
    pub(super) encoded_per_arrow_byte: f64,
    pub(super) schema_fingerprint: String,
    pub(super) cancel: CancellationToken,
    pub(super) metrics: Option<Arc<Metrics>>,
    /// When the last rows were taken into the rollover.
    pub(super) last_row_at: Option<std::time::Instant>,
    /// Whether copies replicated from other clusters become rows.
    pub(super) offline_origins: OfflineOrigins,
}

impl DeltaSink {
    /// A sink for the table `spec` describes; `table` when the runtime already opened it.
    pub fn new(
        spec: TableSpec,
        config: DeltaSinkConfig,
        table: Option<Table>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            spec,
            config,
            table,
            layout: None,
            rollover: Rollover::default(),
            writer: RolloverWriter::default(),
            stale: false,
            gap_grace: GAP_GRACE,
            bridge: GapBridge::default(),
            encoded_per_arrow_byte: 0.25,
            schema_fingerprint: String::new(),
            cancel,
            metrics: None,
            last_row_at: None,
            offline_origins: OfflineOrigins::AllRegions,
        }
    }

    /// Whether copies replicated from other clusters become rows (see `origins`).
    pub fn set_offline_origins(&mut self, origins: OfflineOrigins) {
        self.offline_origins = origins;
    }

    /// Counts commits, files and bytes in `metrics`.
    pub fn set_metrics(&mut self, metrics: Arc<Metrics>) {
        self.metrics = Some(metrics);
    }

    /// Records the reader schema's fingerprint in every file written from now on.
    pub fn set_schema_fingerprint(&mut self, fingerprint: String) {
        self.schema_fingerprint = fingerprint;
    }

    pub(super) fn labels(&self) -> PipelineLabels {
        PipelineLabels {
            pipeline: self.spec.pipeline.clone(),
        }
    }

    /// Waits out one backoff delay; `Err` when shutdown came first.
    pub(super) async fn pause(
        &self,
        backoff: &mut Backoff,
        what: &str,
        error: &(dyn std::fmt::Display + Sync),
    ) -> Result<(), SinkError> {
        backoff
            .wait(
                &self.cancel,
                &format!("{what}; nothing acknowledged"),
                error,
            )
            .await
            .map_err(|_| SinkError::Cancelled(format!("{what}: {error}")))
    }

    /// Opens the table (retrying while the store does not answer) and derives the layout.
    async fn open_until_done(&mut self) -> Result<(), SinkError> {
        let mut backoff = Backoff::default();
        while self.table.is_none() {
            match self.spec.open().await {
                Ok((table, opened)) => {
                    log_opened(&table, &opened);
                    self.table = Some(table);
                }
                Err(TableError::Refused(why)) => return Err(SinkError::fatal(why)),
                Err(e) => {
                    self.pause(&mut backoff, "cannot open the offline table", &e)
                        .await?
                }
            }
        }
        let table = self
            .table
            .as_ref()
            .ok_or_else(|| SinkError::fatal("no table"))?;
        let schema = table
            .arrow_schema()
            .map_err(|e| SinkError::fatal_from("offline table schema", e))?;
        self.layout = Some(self.spec.layout(schema));
        if let Some(metrics) = &self.metrics {
            metrics
                .offline_table_version
                .get_or_create(&self.labels())
                .set(i64::try_from(table.version()).unwrap_or(i64::MAX));
        }
        Ok(())
    }

    /// Looks up (once) what the table holds of each of `partitions`.
    pub(super) async fn learn_positions(
        &mut self,
        partitions: &[Arc<str>],
    ) -> Result<(), SinkError> {
        let mut backoff = Backoff::default();
        for partition in partitions {
            loop {
                let table = self
                    .table
                    .as_mut()
                    .ok_or_else(|| SinkError::fatal("no table"))?;
                if table.positions().knows(partition) {
                    break;
                }
                match table.position(partition).await {
                    Ok(found) => {
                        tracing::info!(%partition, committed = ?found, "offline table position");
                        break;
                    }
                    Err(e) => {
                        self.pause(&mut backoff, "cannot read the offline table", &e)
                            .await?
                    }
                }
            }
        }
        Ok(())
    }

    fn due_by_size(&self) -> bool {
        self.config.rollover_bytes.is_some_and(|target| {
            self.rollover.arrow_bytes() as f64 * self.encoded_per_arrow_byte >= target as f64
        })
    }

    fn limits(&self) -> RolloverLimits {
        RolloverLimits {
            rows: self.config.rollover_rows,
            interval: self.config.rollover_interval,
        }
    }

    fn due_by_age(&self) -> bool {
        self.limits()
            .due_at(self.rollover.opened_at)
            .is_some_and(|at| std::time::Instant::now() >= at)
    }

    fn due_when_idle(&self) -> bool {
        self.last_row_at.is_some_and(|last| {
            idle_commit_due(
                self.rollover.rows(),
                self.config.rollover_rows,
                last.elapsed(),
                self.config.idle_commit,
            )
        })
    }
}

/// Whether a rollover of `rows` commits early because no row came for `quiet`: only when
/// the rule is on (`idle_commit` > 0) and the rollover holds at least a tenth of
/// `rollover_rows`, so that a trickle of events does not become a file per event.
pub(super) fn idle_commit_due(
    rows: usize,
    rollover_rows: usize,
    quiet: std::time::Duration,
    idle_commit: std::time::Duration,
) -> bool {
    !idle_commit.is_zero() && rows > 0 && rows >= rollover_rows / 10 && quiet >= idle_commit
}

fn log_opened(table: &Table, opened: &Opened) {
    match opened {
        Opened::Existing => {
            tracing::info!(table = %table.url(), version = table.version(), "offline table opened")
        }
        Opened::Created => tracing::info!(table = %table.url(), "offline table created"),
        Opened::Evolved(columns) => {
            tracing::info!(table = %table.url(), ?columns, "offline table opened; columns added for new fields")
        }
    }
}

#[async_trait]
impl Sink for DeltaSink {
    fn kind(&self) -> &'static str {
        "offline"
    }

    fn pending_rows(&self) -> usize {
        self.buffered_rows()
    }

    /// A row waits for its rollover's commit.
    fn longest_hold(&self) -> std::time::Duration {
        self.config.rollover_interval
    }

    async fn start(&mut self) -> Result<(), SinkError> {
        self.open_until_done().await
    }

    /// Gaps `probe` says the source skipped are committed past without waiting.
    fn set_skipped_entries(&mut self, probe: Arc<dyn SkippedEntries>) {
        self.bridge.set_probe(probe);
    }

    async fn write(&mut self, mut batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        if batch.positions.is_empty() {
            return Ok(Vec::new());
        }
        if self.layout.is_none() {
            self.open_until_done().await?;
        }
        let mut streams = distinct_streams([batch.positions.as_slice()]);
        match self.offline_origins {
            OfflineOrigins::OwnRegion => {
                origins::drop_copies(&mut batch).map_err(fatal)?;
            }
            OfflineOrigins::AllRegions => {
                streams.extend(origins::origin_streams(batch.positions.iter()))
            }
        }
        self.learn_positions(&streams).await?;
        let layout = self
            .layout
            .as_ref()
            .ok_or_else(|| SinkError::fatal("no table layout"))?;
        let publish_ms: Vec<u64> = batch
            .row_positions
            .iter()
            .map(|&i| batch.publish_times_ms.get(i).copied().unwrap_or(0))
            .collect();
        let rows = layout
            .to_table_rows(
                &batch.rows,
                Some(&publish_ms),
                chrono::Utc::now().timestamp_millis(),
            )
            .map_err(|e| SinkError::fatal_from("shaping rows for the offline table", e))?;
        let rewound = self
            .rollover
            .take(rows, batch.row_positions, batch.positions)
            .map_err(fatal)?;
        self.last_row_at = Some(std::time::Instant::now());
        if rewound > 0 {
            tracing::info!(
                rows = rewound,
                "the broker delivers a partition again from an earlier message; dropping what it sends again"
            );
        }
        // Redelivered messages the table already holds are dropped now (they cost memory
        // until the rollover otherwise); the commit checks again against the newest state.
        let table = self
            .table
            .as_ref()
            .ok_or_else(|| SinkError::fatal("no table"))?;
        let dropped = self
            .rollover
            .drop_held_in_newest(table.positions())
            .map_err(fatal)?;
        self.count_skipped(dropped);
        let now = std::time::Instant::now();
        if self
            .limits()
            .due(self.rollover.rows(), self.rollover.opened_at, now)
            || self.due_by_size()
        {
            self.commit().await
        } else {
            Ok(Vec::new())
        }
    }

    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        if self.due_by_age() || self.due_when_idle() {
            self.commit().await
        } else {
            Ok(Vec::new())
        }
    }

    async fn flush(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        if self.table.is_none() {
            return Ok(Vec::new());
        }
        let durable = self.commit().await?;
        if let Some(table) = self.table.as_mut() {
            // A checkpoint cut off by the exit would leave the next start more commits to read.
            table.finish_checkpoint(CHECKPOINT_AT_SHUTDOWN).await;
        }
        Ok(durable)
    }
}

#[cfg(test)]
mod tests;
