//! The offline sink: buffers a rollover's rows, commits them to the pipeline's Delta table as
//! one version, and reports its messages durable only once that version exists.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::commit::CommitError;
use super::config::OfflineSinkConfig;
use super::files::{metadata_keys, write_files, writer_properties};
use super::layout::TableLayout;
use super::positions::{representable, transactions};
use super::rollover::Rollover;
use super::table::{OfflineTable, Opened, TableError};
use super::TableSpec;
use crate::metrics::{Metrics, PipelineLabels};
use crate::record::RowBatch;
use crate::retry::Backoff;
use crate::sink::{Sink, SinkError};
use crate::source::MessagePosition;

/// How long shutdown waits for a checkpoint being written.
const CHECKPOINT_AT_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(10);

/// How long messages after a gap in a partition wait for it to fill before the gap is taken as
/// real (Pulsar's Failover rewind comes within a second; expired messages never do).
const GAP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes a pipeline's rows to its Delta table (see the module docs of [`super`]).
pub struct DeltaSink {
    spec: TableSpec,
    config: OfflineSinkConfig,
    table: Option<OfflineTable>,
    layout: Option<TableLayout>,
    rollover: Rollover,
    gap_grace: std::time::Duration,
    /// Encoded bytes per in-memory Arrow byte, learned from the last commit.
    encoded_per_arrow_byte: f64,
    schema_fingerprint: String,
    cancel: CancellationToken,
    metrics: Option<Arc<Metrics>>,
}

impl DeltaSink {
    /// A sink for the table `spec` describes; `table` when the runtime already opened it.
    pub fn new(
        spec: TableSpec,
        config: OfflineSinkConfig,
        table: Option<OfflineTable>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            spec,
            config,
            table,
            layout: None,
            rollover: Rollover::default(),
            gap_grace: GAP_GRACE,
            encoded_per_arrow_byte: 0.25,
            schema_fingerprint: String::new(),
            cancel,
            metrics: None,
        }
    }

    /// Counts commits, files and bytes in `metrics`.
    pub fn set_metrics(&mut self, metrics: Arc<Metrics>) {
        self.metrics = Some(metrics);
    }

    /// Records the reader schema's fingerprint in every file written from now on.
    pub fn set_schema_fingerprint(&mut self, fingerprint: String) {
        self.schema_fingerprint = fingerprint;
    }

    fn labels(&self) -> PipelineLabels {
        PipelineLabels {
            pipeline: self.spec.pipeline.clone(),
        }
    }

    /// Waits out one backoff delay; `Err` when shutdown came first.
    async fn pause(
        &self,
        backoff: &mut Backoff,
        what: &str,
        error: &(dyn std::fmt::Display + Sync),
    ) -> Result<(), SinkError> {
        let error = error.to_string();
        let wait = backoff.next_delay();
        tracing::warn!(error = %error, retry_in = ?wait, "{what}; nothing acknowledged, retrying");
        tokio::select! {
            () = self.cancel.cancelled() => Err(SinkError::Cancelled(format!("{what}: {error}"))),
            () = tokio::time::sleep(wait) => Ok(()),
        }
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
                Err(TableError::Refused(why)) => return Err(SinkError::Fatal(why)),
                Err(e) => {
                    self.pause(&mut backoff, "cannot open the offline table", &e)
                        .await?
                }
            }
        }
        let table = self
            .table
            .as_ref()
            .ok_or_else(|| SinkError::Fatal("no table".into()))?;
        let schema = table
            .arrow_schema()
            .map_err(|e| SinkError::Fatal(e.to_string()))?;
        self.layout = Some(self.spec.layout(schema));
        if let Some(metrics) = &self.metrics {
            metrics
                .offline_table_version
                .get_or_create(&self.labels())
                .set(i64::try_from(table.version()).unwrap_or(i64::MAX));
        }
        Ok(())
    }

    /// Looks up (once) what the table holds of each partition in `positions`.
    async fn learn_positions(&mut self, positions: &[MessagePosition]) -> Result<(), SinkError> {
        let mut backoff = Backoff::default();
        for position in positions {
            loop {
                let table = self
                    .table
                    .as_mut()
                    .ok_or_else(|| SinkError::Fatal("no table".into()))?;
                if table.positions().knows(&position.topic) {
                    break;
                }
                match table.position(&position.topic).await {
                    Ok(found) => {
                        tracing::info!(partition = %position.topic, committed = ?found, "offline table position");
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

    fn due_by_age(&self) -> bool {
        self.rollover
            .opened_at
            .is_some_and(|opened| opened.elapsed() >= self.config.rollover_interval)
    }

    /// Commits what the rollover may take: refresh the table, skip rows it now holds, take
    /// per partition the unbroken run from the table's position (see [`super::rollover`]),
    /// write those files and commit them with their positions; if another writer committed
    /// first, start over from the refresh. Returns the messages that are durable.
    async fn commit(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        if self.rollover.messages() == 0 {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let labels = self.labels();
        let mut backoff = Backoff::default();
        // Files already written for exactly this set of messages (reused after a conflict).
        let mut written: Option<(Vec<String>, Vec<deltalake::kernel::Add>)> = None;
        let taken = loop {
            let table = self
                .table
                .as_mut()
                .ok_or_else(|| SinkError::Fatal("no table".into()))?;
            if let Err(e) = table.refresh().await {
                self.pause(&mut backoff, "cannot read the offline table", &e)
                    .await?;
                continue;
            }
            let buffered: Vec<MessagePosition> = self.rollover.positions().cloned().collect();
            self.learn_positions(&buffered).await?;
            let table = self
                .table
                .as_ref()
                .ok_or_else(|| SinkError::Fatal("no table".into()))?;
            let dropped = self.rollover.drop_held(table.positions()).map_err(fatal)?;
            let (cuts, accepted) = self.rollover.cuts(table.positions(), self.gap_grace);
            self.count_skipped(dropped);
            for (partition, held, next) in &accepted {
                tracing::warn!(%partition, ?held, ?next, "messages between what the table holds and the next one never arrived (expired or deleted?); committing past them");
            }
            let taken = self.rollover.split(&cuts).map_err(fatal)?;
            if self.rollover.positions().next().is_some() {
                tracing::debug!(
                    waiting = self.rollover.messages(),
                    "messages after a gap wait for it to fill"
                );
            }
            if taken.rows() == 0 {
                break taken;
            }
            let table = self
                .table
                .as_mut()
                .ok_or_else(|| SinkError::Fatal("no table".into()))?;
            // Same messages and same rows: the files written before a conflict still fit.
            let ids: Vec<String> = std::iter::once(taken.rows().to_string())
                .chain(
                    taken
                        .positions()
                        .map(|p| format!("{}@{}", p.display_id(), p.topic)),
                )
                .collect();
            let adds = match written.take() {
                Some((same, adds)) if same == ids => adds,
                _ => {
                    let properties = writer_properties(
                        &self.config,
                        vec![
                            (metadata_keys::PIPELINE.into(), self.spec.pipeline.clone()),
                            (
                                metadata_keys::SCHEMA_FINGERPRINT.into(),
                                self.schema_fingerprint.clone(),
                            ),
                            (metadata_keys::MESSAGE_RANGES.into(), taken.ranges_json()),
                        ],
                    )
                    .map_err(SinkError::Fatal)?;
                    let files = match table.files_table().await {
                        Ok(files) => write_files(files, taken.row_batches(), properties)
                            .await
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    match files {
                        Ok(adds) => adds,
                        Err(e) => {
                            self.rollover.put_back(taken);
                            self.pause(&mut backoff, "writing Parquet files failed", &e)
                                .await?;
                            continue;
                        }
                    }
                }
            };
            let now_ms = chrono::Utc::now().timestamp_millis();
            let mut txns = Vec::new();
            for (partition, key) in taken.commit_keys() {
                if !representable(key) {
                    return Err(SinkError::Fatal(format!("message id {key:?} of {partition} does not fit a Delta transaction version")));
                }
                if table
                    .positions()
                    .get(&partition)
                    .is_none_or(|held| key > held)
                {
                    txns.extend(transactions(&partition, key, now_ms));
                }
            }
            let (files, bytes) = (adds.len(), adds.iter().map(|a| a.size).sum::<i64>());
            match table.commit(adds.clone(), txns).await {
                Ok(committed) => {
                    tracing::info!(
                        version = committed.version,
                        files,
                        bytes,
                        rows = taken.rows(),
                        "offline rollover committed"
                    );
                    if let Some(metrics) = &self.metrics {
                        metrics.offline_commits.get_or_create(&labels).inc();
                        metrics
                            .parquet_files_written
                            .get_or_create(&labels)
                            .inc_by(files as u64);
                        metrics
                            .parquet_bytes_written
                            .get_or_create(&labels)
                            .inc_by(u64::try_from(bytes).unwrap_or(0));
                        metrics
                            .offline_table_version
                            .get_or_create(&labels)
                            .set(i64::try_from(committed.version).unwrap_or(i64::MAX));
                    }
                    let arrow_bytes = taken.arrow_bytes();
                    if arrow_bytes > 0 && bytes > 0 {
                        self.encoded_per_arrow_byte = bytes as f64 / arrow_bytes as f64;
                    }
                    break taken;
                }
                Err(CommitError::Conflict(version)) => {
                    tracing::info!(
                        version,
                        "another writer committed first; re-checking what the table holds"
                    );
                    if let Some(metrics) = &self.metrics {
                        metrics
                            .offline_commit_conflicts
                            .get_or_create(&labels)
                            .inc();
                    }
                    written = Some((ids, adds));
                    self.rollover.put_back(taken);
                }
                Err(CommitError::Failed(e)) => {
                    // It may have landed: the refresh at the top of the loop finds out.
                    written = Some((ids, adds));
                    self.rollover.put_back(taken);
                    self.pause(&mut backoff, "offline commit failed", &e)
                        .await?;
                }
            }
        };
        if let Some(metrics) = &self.metrics {
            metrics
                .offline_commit_seconds
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
        }
        Ok(taken.into_positions())
    }

    fn count_skipped(&self, rows: usize) {
        if rows == 0 {
            return;
        }
        tracing::info!(
            dropped = rows,
            "skipping rows already committed (redelivered, or committed by another writer)"
        );
        if let Some(metrics) = &self.metrics {
            metrics
                .offline_rows_skipped
                .get_or_create(&self.labels())
                .inc_by(rows as u64);
        }
    }

    /// Sets how long messages after a gap wait for it to fill (a backfill never commits past
    /// a gap: `Duration::MAX`).
    pub fn set_gap_grace(&mut self, grace: std::time::Duration) {
        self.gap_grace = grace;
    }

    /// Rows still buffered (after a flush: rows that could not be committed because of a gap).
    pub fn buffered_rows(&self) -> usize {
        self.rollover.rows()
    }
}

fn fatal(error: arrow::error::ArrowError) -> SinkError {
    SinkError::Fatal(format!("offline rollover: {error}"))
}

fn log_opened(table: &OfflineTable, opened: &Opened) {
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

    async fn start(&mut self) -> Result<(), SinkError> {
        self.open_until_done().await
    }

    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        if batch.positions.is_empty() {
            return Ok(Vec::new());
        }
        if self.layout.is_none() {
            self.open_until_done().await?;
        }
        self.learn_positions(&batch.positions).await?;
        let layout = self
            .layout
            .as_ref()
            .ok_or_else(|| SinkError::Fatal("no table layout".into()))?;
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
            .map_err(|e| SinkError::Fatal(format!("shaping rows for the offline table: {e}")))?;
        let rewound = self
            .rollover
            .take(rows, batch.row_positions, batch.positions)
            .map_err(fatal)?;
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
            .ok_or_else(|| SinkError::Fatal("no table".into()))?;
        let dropped = self.rollover.drop_held(table.positions()).map_err(fatal)?;
        self.count_skipped(dropped);
        if self.rollover.rows() >= self.config.rollover_rows
            || self.due_by_size()
            || self.due_by_age()
        {
            self.commit().await
        } else {
            Ok(Vec::new())
        }
    }

    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        if self.due_by_age() {
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
