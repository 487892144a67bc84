//! The offline sink: buffers a rollover's rows, commits them to the pipeline's Delta table as
//! one version, and reports its messages durable only once that version exists.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{BooleanArray, RecordBatch};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::config::OfflineSinkConfig;
use super::files::{metadata_keys, write_files, writer_properties};
use super::layout::TableLayout;
use super::positions::{message_key, representable, transactions, CommittedPositions, MessageKey};
use super::table::{CommitError, OfflineTable, Opened, TableError};
use super::TableSpec;
use crate::metrics::{Metrics, PipelineLabels};
use crate::record::RowBatch;
use crate::retry::Backoff;
use crate::sink::{Sink, SinkError};
use crate::source::MessagePosition;

/// Rows waiting for the next rollover, in table layout, with the message of each row.
#[derive(Default)]
struct Rollover {
    batches: Vec<(RecordBatch, Vec<usize>)>,
    /// Every message taken since the last commit (rows or not), in receive order.
    positions: Vec<MessagePosition>,
    rows: usize,
    arrow_bytes: usize,
    opened_at: Option<Instant>,
}

impl Rollover {
    /// Drops rows whose message the table already holds; returns how many were dropped.
    fn drop_held(&mut self, held: &CommittedPositions) -> Result<usize, SinkError> {
        let mut dropped = 0;
        for (rows, messages) in &mut self.batches {
            let keep: Vec<bool> = messages
                .iter()
                .map(|&i| !self.positions.get(i).is_some_and(|p| held.holds(p)))
                .collect();
            let gone = keep.iter().filter(|k| !**k).count();
            if gone == 0 {
                continue;
            }
            *rows = arrow::compute::filter_record_batch(rows, &BooleanArray::from(keep.clone()))
                .map_err(|e| SinkError::Fatal(format!("skipping committed rows: {e}")))?;
            let mut keep = keep.into_iter();
            messages.retain(|_| keep.next().unwrap_or(false));
            dropped += gone;
        }
        self.batches.retain(|(rows, _)| rows.num_rows() > 0);
        self.rows -= dropped;
        Ok(dropped)
    }

    /// Per topic partition, the last message taken (dead-lettered ones included).
    fn last_per_partition(&self) -> BTreeMap<&str, MessageKey> {
        let mut last = BTreeMap::new();
        for position in &self.positions {
            let key = message_key(position);
            let entry = last.entry(position.topic.as_str()).or_insert(key);
            *entry = (*entry).max(key);
        }
        last
    }

    /// Per topic partition, `[first, last]` message id, as JSON (file metadata).
    fn ranges_json(&self) -> String {
        let mut ranges: BTreeMap<&str, (String, String)> = BTreeMap::new();
        for position in &self.positions {
            let id = position.display_id();
            ranges
                .entry(position.topic.as_str())
                .and_modify(|r| r.1 = id.clone())
                .or_insert_with(|| (id.clone(), id));
        }
        serde_json::to_string(&ranges).unwrap_or_default()
    }
}

/// Writes a pipeline's rows to its Delta table (see the module docs of [`super`]).
pub struct DeltaSink {
    spec: TableSpec,
    config: OfflineSinkConfig,
    table: Option<OfflineTable>,
    layout: Option<TableLayout>,
    rollover: Rollover,
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
            self.rollover.arrow_bytes as f64 * self.encoded_per_arrow_byte >= target as f64
        })
    }

    fn due_by_age(&self) -> bool {
        self.rollover
            .opened_at
            .is_some_and(|opened| opened.elapsed() >= self.config.rollover_interval)
    }

    /// Commits the rollover: refresh the table, skip rows it now holds, write the files,
    /// commit them with this rollover's positions; on a conflict start over from the refresh.
    /// Returns the messages that are durable.
    async fn commit(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        if self.rollover.rows == 0 {
            let done = std::mem::take(&mut self.rollover);
            return Ok(done.positions);
        }
        let started = Instant::now();
        let labels = self.labels();
        let mut backoff = Backoff::default();
        let mut written: Option<Vec<deltalake::kernel::Add>> = None;
        let arrow_bytes = self.rollover.arrow_bytes;
        loop {
            let table = self
                .table
                .as_mut()
                .ok_or_else(|| SinkError::Fatal("no table".into()))?;
            if let Err(e) = table.refresh().await {
                self.pause(&mut backoff, "cannot read the offline table", &e)
                    .await?;
                continue;
            }
            let partitions: Vec<MessagePosition> = self.rollover.positions.clone();
            self.learn_positions(&partitions).await?;
            let table = self
                .table
                .as_mut()
                .ok_or_else(|| SinkError::Fatal("no table".into()))?;
            let dropped = self.rollover.drop_held(table.positions())?;
            if dropped > 0 {
                tracing::info!(
                    dropped,
                    "skipping rows already committed (redelivered, or committed by another writer)"
                );
                if let Some(metrics) = &self.metrics {
                    metrics
                        .offline_rows_skipped
                        .get_or_create(&labels)
                        .inc_by(dropped as u64);
                }
                written = None;
            }
            if self.rollover.rows == 0 {
                break;
            }
            let adds = match written.take() {
                Some(adds) => adds,
                None => {
                    let properties = writer_properties(
                        &self.config,
                        vec![
                            (metadata_keys::PIPELINE.into(), self.spec.pipeline.clone()),
                            (
                                metadata_keys::SCHEMA_FINGERPRINT.into(),
                                self.schema_fingerprint.clone(),
                            ),
                            (
                                metadata_keys::MESSAGE_RANGES.into(),
                                self.rollover.ranges_json(),
                            ),
                        ],
                    )
                    .map_err(SinkError::Fatal)?;
                    let batches = self
                        .rollover
                        .batches
                        .iter()
                        .map(|(b, _)| b.clone())
                        .collect();
                    match write_files(table.delta(), batches, properties).await {
                        Ok(adds) => adds,
                        Err(e) => {
                            self.pause(&mut backoff, "writing Parquet files failed", &e)
                                .await?;
                            continue;
                        }
                    }
                }
            };
            let table = self
                .table
                .as_mut()
                .ok_or_else(|| SinkError::Fatal("no table".into()))?;
            let now_ms = chrono::Utc::now().timestamp_millis();
            let mut txns = Vec::new();
            for (partition, last) in self.rollover.last_per_partition() {
                if !representable(last) {
                    return Err(SinkError::Fatal(format!("message id {last:?} of {partition} does not fit a Delta transaction version")));
                }
                if table
                    .positions()
                    .get(partition)
                    .is_none_or(|held| last > held)
                {
                    txns.extend(transactions(partition, last, now_ms));
                }
            }
            let metadata = HashMap::from([
                (
                    "pipeline".to_string(),
                    serde_json::Value::from(self.spec.pipeline.clone()),
                ),
                (
                    "instance".to_string(),
                    serde_json::Value::from(self.spec.instance.clone()),
                ),
                (
                    "message_ranges".to_string(),
                    serde_json::Value::from(self.rollover.ranges_json()),
                ),
            ]);
            let files = adds.len();
            let bytes: i64 = adds.iter().map(|a| a.size).sum();
            match table.commit(adds.clone(), txns, metadata).await {
                Ok(committed) => {
                    tracing::info!(
                        version = committed.version,
                        files,
                        bytes,
                        rows = self.rollover.rows,
                        "offline rollover committed"
                    );
                    if let Some(metrics) = &self.metrics {
                        metrics.offline_commits.get_or_create(&labels).inc();
                        metrics
                            .offline_commit_concurrent
                            .get_or_create(&labels)
                            .inc_by(committed.retries);
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
                    if arrow_bytes > 0 && bytes > 0 {
                        self.encoded_per_arrow_byte = bytes as f64 / arrow_bytes as f64;
                    }
                    break;
                }
                Err(CommitError::Conflict(why)) => {
                    tracing::info!(%why, "offline commit met another writer's; re-checking positions");
                    if let Some(metrics) = &self.metrics {
                        metrics
                            .offline_commit_conflicts
                            .get_or_create(&labels)
                            .inc();
                    }
                    // The files stay usable unless the re-check drops rows.
                    written = Some(adds);
                }
                Err(CommitError::Failed(e)) => {
                    // It may have landed: the refresh at the top of the loop finds out.
                    self.pause(&mut backoff, "offline commit failed", &e)
                        .await?;
                    written = Some(adds);
                }
            }
        }
        if let Some(metrics) = &self.metrics {
            metrics
                .offline_commit_seconds
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
        }
        Ok(std::mem::take(&mut self.rollover).positions)
    }
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
        let offset = self.rollover.positions.len();
        let messages: Vec<usize> = batch.row_positions.iter().map(|&i| offset + i).collect();
        self.rollover.positions.extend(batch.positions);
        self.rollover.opened_at.get_or_insert_with(Instant::now);
        if rows.num_rows() > 0 {
            self.rollover.rows += rows.num_rows();
            self.rollover.arrow_bytes += rows.get_array_memory_size();
            self.rollover.batches.push((rows, messages));
        }
        // Redelivered messages the table already holds are dropped now (they cost memory
        // until the rollover otherwise); the commit checks again against the newest state.
        let table = self
            .table
            .as_ref()
            .ok_or_else(|| SinkError::Fatal("no table".into()))?;
        let dropped = self.rollover.drop_held(table.positions())?;
        if dropped > 0 {
            tracing::info!(
                dropped,
                "skipping rows already committed (redelivered, or committed by another writer)"
            );
            if let Some(metrics) = &self.metrics {
                metrics
                    .offline_rows_skipped
                    .get_or_create(&self.labels())
                    .inc_by(dropped as u64);
            }
        }
        if self.rollover.rows >= self.config.rollover_rows
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
        if self.table.is_none() && self.rollover.rows == 0 {
            return Ok(std::mem::take(&mut self.rollover).positions);
        }
        self.commit().await
    }
}
