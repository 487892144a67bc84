//! Buffers rows and commits them as Parquet files; acknowledges only committed rows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use tokio_util::sync::CancellationToken;

use super::partition::split;
use super::recovery::{message_key, MessageKey, Recovered};
use super::{Compression, OfflineSinkConfig};
use crate::metrics::{Metrics, PipelineLabels};
use crate::record::RowBatch;
use crate::retry::Backoff;
use crate::sink::{Sink, SinkError};
use crate::source::MessagePosition;

/// File-level metadata keys written into every Parquet file.
pub mod metadata_keys {
    /// The pipeline that wrote the file.
    pub const PIPELINE: &str = "feature_connector.pipeline";
    /// Topic of the rows.
    pub const TOPIC: &str = "feature_connector.topic";
    /// First message id (`ledger:entry:index`) in the file.
    pub const FIRST_MESSAGE: &str = "feature_connector.first_message_id";
    /// Last message id in the file.
    pub const LAST_MESSAGE: &str = "feature_connector.last_message_id";
    /// Rabin fingerprint (hex) of the pipeline's reader schema.
    pub const SCHEMA_FINGERPRINT: &str = "feature_connector.schema_fingerprint";
    /// The rollover batch the file belongs to (`{instance}-{first message}`).
    pub const BATCH_ID: &str = "feature_connector.batch_id";
    /// How many files that batch has.
    pub const BATCH_FILES: &str = "feature_connector.batch_files";
    /// Per topic partition, `[first, last]` message id of the batch (JSON).
    pub const MESSAGE_RANGES: &str = "feature_connector.message_ranges";
}

/// Writes `{prefix}/{pipeline}/dt=YYYY-MM-DD/hr=HH/part-{instance}-{partition}-{first message}.parquet`.
pub struct ParquetSink {
    store: Arc<dyn ObjectStore>,
    prefix: StorePath,
    pipeline: String,
    instance: String,
    config: OfflineSinkConfig,
    schema: SchemaRef,
    buffered: Vec<RecordBatch>,
    buffered_rows: usize,
    positions: Vec<MessagePosition>,
    opened_at: Option<Instant>,
    cancel: CancellationToken,
    committed: HashMap<String, MessageKey>,
    event_time: String,
    schema_fingerprint: String,
    first_row: Option<MessagePosition>,
    buffered_arrow_bytes: usize,
    /// Encoded bytes per in-memory Arrow byte, learned from the last commit.
    encoded_per_arrow_byte: f64,
    /// When rows last arrived (or recovery ran).
    last_rows_at: Instant,
    /// Topic partitions this sink has had messages from since it started.
    seen_partitions: HashSet<String>,
    metrics: Option<Arc<Metrics>>,
}

impl ParquetSink {
    /// A sink writing rows of `schema` under `prefix` of `store`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: StorePath,
        pipeline: &str,
        config: OfflineSinkConfig,
        schema: SchemaRef,
        event_time: &str,
        cancel: CancellationToken,
    ) -> Self {
        let instance = std::env::var("FC_INSTANCE_ID")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "local".into());
        Self {
            store,
            prefix,
            pipeline: pipeline.to_string(),
            instance: sanitize(&instance),
            config,
            schema,
            buffered: Vec::new(),
            buffered_rows: 0,
            positions: Vec::new(),
            opened_at: None,
            cancel,
            committed: HashMap::new(),
            event_time: event_time.to_string(),
            schema_fingerprint: String::new(),
            first_row: None,
            buffered_arrow_bytes: 0,
            encoded_per_arrow_byte: 0.25,
            last_rows_at: Instant::now(),
            seen_partitions: HashSet::new(),
            metrics: None,
        }
    }

    /// Counts committed files and bytes in `metrics`.
    pub fn set_metrics(&mut self, metrics: Arc<Metrics>) {
        self.metrics = Some(metrics);
    }

    /// Recovery, retried with backoff while the store does not answer.
    async fn recover_until_done(&mut self) -> Result<(), SinkError> {
        let mut backoff = Backoff::default();
        loop {
            match self.recover().await {
                Ok(recovered) => {
                    tracing::info!(
                        files = recovered.files,
                        removed = recovered.removed,
                        committed = ?recovered.committed,
                        "offline store recovered"
                    );
                    self.last_rows_at = Instant::now();
                    return Ok(());
                }
                Err(e) => {
                    let wait = backoff.next_delay();
                    tracing::warn!(error = %e, retry_in = ?wait, "cannot read the offline store's committed files; retrying");
                    tokio::select! {
                        () = self.cancel.cancelled() => {
                            return Err(SinkError::Cancelled("the object store was unreachable".into()));
                        }
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// Records the reader schema's fingerprint in every file written from now on.
    pub fn set_schema_fingerprint(&mut self, fingerprint: String) {
        self.schema_fingerprint = fingerprint;
    }

    /// Reads what earlier runs committed (see [`super::recovery`]); call before the first write.
    pub async fn recover(&mut self) -> Result<Recovered, SinkError> {
        let dir = self.prefix.clone().join(self.pipeline.as_str());
        let recovered = super::recovery::recover(&self.store, &dir, &self.instance)
            .await
            .map_err(SinkError::Fatal)?;
        self.committed = recovered.committed.clone();
        Ok(recovered)
    }

    /// Drops rows of messages an earlier run already committed (redelivered after a crash
    /// between a commit and its acknowledgement). Their positions stay, to be acknowledged.
    fn drop_committed(
        &self,
        batch: &RowBatch,
    ) -> Result<(RecordBatch, Option<MessagePosition>), SinkError> {
        let position_of = |row: usize| {
            batch
                .row_positions
                .get(row)
                .and_then(|&i| batch.positions.get(i))
                .cloned()
        };
        if self.committed.is_empty() {
            return Ok((batch.rows.clone(), position_of(0)));
        }
        let keep: Vec<bool> = batch
            .row_positions
            .iter()
            .map(|&i| {
                batch.positions.get(i).is_none_or(|p| {
                    self.committed
                        .get(&p.topic)
                        .is_none_or(|last| message_key(p) > *last)
                })
            })
            .collect();
        let first_kept = keep.iter().position(|k| *k).and_then(position_of);
        if keep.iter().all(|k| *k) {
            return Ok((batch.rows.clone(), first_kept));
        }
        let dropped = keep.iter().filter(|k| !**k).count();
        tracing::info!(dropped, "skipping rows already committed by an earlier run");
        let kept = arrow::compute::filter_record_batch(
            &batch.rows,
            &arrow::array::BooleanArray::from(keep),
        )
        .map_err(|e| SinkError::Fatal(format!("filtering committed rows: {e}")))?;
        Ok((kept, first_kept))
    }

    /// Per topic, `[first, last]` message id of the buffered positions, as JSON.
    fn ranges_json(&self) -> String {
        let mut ranges: std::collections::BTreeMap<&str, (String, String)> =
            std::collections::BTreeMap::new();
        for position in &self.positions {
            let id = position.display_id();
            ranges
                .entry(position.topic.as_str())
                .and_modify(|r| r.1 = id.clone())
                .or_insert_with(|| (id.clone(), id));
        }
        serde_json::to_string(&ranges).unwrap_or_default()
    }

    fn properties(
        &self,
        first: &str,
        last: &str,
        topic: &str,
        batch_files: usize,
    ) -> Result<WriterProperties, SinkError> {
        let compression = match self.config.compression {
            Compression::Zstd => ParquetCompression::ZSTD(
                ZstdLevel::try_new(self.config.zstd_level)
                    .map_err(|e| SinkError::Fatal(e.to_string()))?,
            ),
            Compression::Snappy => ParquetCompression::SNAPPY,
            Compression::Lz4 => ParquetCompression::LZ4_RAW,
            Compression::None => ParquetCompression::UNCOMPRESSED,
        };
        let kv = |k: &str, v: &str| KeyValue::new(k.to_string(), v.to_string());
        Ok(WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(self.config.row_group_rows))
            .set_dictionary_enabled(true)
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_key_value_metadata(Some(vec![
                kv(metadata_keys::PIPELINE, &self.pipeline),
                kv(metadata_keys::SCHEMA_FINGERPRINT, &self.schema_fingerprint),
                kv(metadata_keys::TOPIC, topic),
                kv(metadata_keys::FIRST_MESSAGE, first),
                kv(metadata_keys::LAST_MESSAGE, last),
                kv(
                    metadata_keys::BATCH_ID,
                    &format!("{}-{first}", self.instance),
                ),
                kv(metadata_keys::BATCH_FILES, &batch_files.to_string()),
                kv(metadata_keys::MESSAGE_RANGES, &self.ranges_json()),
            ]))
            .build())
    }

    /// Encodes the buffer off the runtime, one file per partition, and puts them; retries
    /// each put until it succeeds. Only then are the buffer's messages acknowledged.
    async fn commit(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        if self.buffered_rows == 0 {
            self.opened_at = None;
            return Ok(std::mem::take(&mut self.positions));
        }
        let (Some(first), Some(last)) = (self.positions.first(), self.positions.last()) else {
            return Err(SinkError::Fatal(
                "rows buffered without message positions".into(),
            ));
        };
        let first = self.first_row.as_ref().unwrap_or(first);
        let (first_id, last_id, topic) =
            (first.display_id(), last.display_id(), first.topic.clone());
        let fatal =
            |what: &str, e: &dyn std::fmt::Display| SinkError::Fatal(format!("{what}: {e}"));
        // Batches go to the encoder as they were buffered, split per partition: concatenating
        // them first held a second copy of every row in memory while encoding.
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut parts: BTreeMap<String, Vec<RecordBatch>> = BTreeMap::new();
        for batch in std::mem::take(&mut self.buffered) {
            let split = split(
                &batch,
                &self.event_time,
                self.config.partition_by,
                self.config.partition_granularity,
                now_ms,
            )
            .map_err(|e| fatal("partitioning rows", &e))?;
            for (dir, rows) in split {
                parts.entry(dir).or_default().push(rows);
            }
        }
        let properties = self.properties(&first_id, &last_id, &topic, parts.len())?;
        let schema = self.schema.clone();
        let encoded = tokio::task::spawn_blocking(move || {
            parts
                .into_iter()
                .map(|(dir, batches)| {
                    Ok((
                        dir,
                        batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
                        encode(schema.clone(), &batches, properties.clone())?,
                    ))
                })
                .collect::<Result<Vec<_>, parquet::errors::ParquetError>>()
        })
        .await
        .map_err(|e| fatal("Parquet encoder task failed", &e))?
        .map_err(|e| fatal("Parquet encoding failed", &e))?;
        let encoded_total: usize = encoded.iter().map(|(_, _, bytes)| bytes.len()).sum();
        let file = format!(
            "part-{}-{}-{}.parquet",
            self.instance,
            partition_of(&topic),
            first_id.replace(':', "_")
        );
        for (dir, rows, bytes) in encoded {
            let mut path = self.prefix.clone().join(self.pipeline.as_str());
            for level in dir.split('/') {
                path = path.join(level);
            }
            let path = path.join(file.as_str());
            let payload = PutPayload::from(bytes);
            let size = payload.content_length();
            self.put_until_done(&path, payload).await?;
            tracing::info!(%path, rows, bytes = size, first = %first_id, last = %last_id, "Parquet file committed");
            if let Some(metrics) = &self.metrics {
                let labels = PipelineLabels {
                    pipeline: self.pipeline.clone(),
                };
                metrics.parquet_files_written.get_or_create(&labels).inc();
                metrics
                    .parquet_bytes_written
                    .get_or_create(&labels)
                    .inc_by(size as u64);
            }
        }
        if self.buffered_arrow_bytes > 0 && encoded_total > 0 {
            self.encoded_per_arrow_byte = encoded_total as f64 / self.buffered_arrow_bytes as f64;
        }
        self.buffered.clear();
        self.first_row = None;
        self.buffered_arrow_bytes = 0;
        self.buffered_rows = 0;
        self.opened_at = None;
        Ok(std::mem::take(&mut self.positions))
    }

    /// A put is atomic on every backend (local disk writes a temporary file and renames
    /// it), so a file is either complete or absent.
    async fn put_until_done(&self, path: &StorePath, payload: PutPayload) -> Result<(), SinkError> {
        let mut backoff = Backoff::default();
        loop {
            match self.store.put(path, payload.clone()).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    let wait = backoff.next_delay();
                    tracing::warn!(error = %e, %path, retry_in = ?wait, "writing Parquet file failed; nothing acknowledged, retrying");
                    tokio::select! {
                        () = self.cancel.cancelled() => {
                            return Err(SinkError::Cancelled("the object store was unreachable".into()));
                        }
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    fn due_by_size(&self) -> bool {
        self.config.rollover_bytes.is_some_and(|target| {
            self.buffered_arrow_bytes as f64 * self.encoded_per_arrow_byte >= target as f64
        })
    }

    fn due_by_age(&self) -> bool {
        self.opened_at
            .is_some_and(|opened| opened.elapsed() >= self.config.rollover_interval)
    }
}

/// The partition index of a topic name (`…-partition-3` → 3), 0 for a non-partitioned one.
fn partition_of(topic: &str) -> u32 {
    topic
        .rsplit_once("-partition-")
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

fn encode(
    schema: SchemaRef,
    batches: &[RecordBatch],
    properties: WriterProperties,
) -> Result<Vec<u8>, parquet::errors::ParquetError> {
    let mut buffer = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buffer, schema, Some(properties))?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.close()?;
    Ok(buffer)
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[async_trait]
impl Sink for ParquetSink {
    fn kind(&self) -> &'static str {
        "offline"
    }

    async fn start(&mut self) -> Result<(), SinkError> {
        self.recover_until_done().await
    }

    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        if batch.positions.is_empty() {
            return Ok(Vec::new());
        }
        let recheck = self.config.recheck_after_idle;
        let new_partition = batch
            .positions
            .iter()
            .any(|p| !self.seen_partitions.contains(&p.topic));
        let idle = self.positions.is_empty() && self.last_rows_at.elapsed() >= recheck;
        if !recheck.is_zero() && (new_partition || idle) {
            // A partition this replica takes over (Failover) or comes back to after a pause
            // may hold files another replica committed but did not get to acknowledge.
            self.recover_until_done().await?;
        }
        for position in &batch.positions {
            if !self.seen_partitions.contains(&position.topic) {
                self.seen_partitions.insert(position.topic.clone());
            }
        }
        self.last_rows_at = Instant::now();
        self.opened_at.get_or_insert_with(Instant::now);
        let (rows, first_kept) = self.drop_committed(&batch)?;
        self.buffered_rows += rows.num_rows();
        if rows.num_rows() > 0 {
            // Files are named after their first row's message: a redelivered buffer whose
            // first messages were skipped must not reuse (and overwrite) a committed name.
            if self.first_row.is_none() {
                self.first_row = first_kept;
            }
            self.buffered_arrow_bytes += rows.get_array_memory_size();
            self.buffered.push(rows);
        }
        self.positions.extend(batch.positions);
        if self.buffered_rows >= self.config.rollover_rows
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
        self.commit().await
    }
}
