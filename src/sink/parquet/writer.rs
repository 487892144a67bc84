//! Buffers rows and commits them as Parquet files; acknowledges only committed rows.

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

use super::{Compression, OfflineSinkConfig};
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
}

/// Writes `{prefix}/{pipeline}/dt=YYYY-MM-DD/part-{instance}-{first message}.parquet`.
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
}

impl ParquetSink {
    /// A sink writing rows of `schema` under `prefix` of `store`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: StorePath,
        pipeline: &str,
        config: OfflineSinkConfig,
        schema: SchemaRef,
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
        }
    }

    fn properties(
        &self,
        first: &str,
        last: &str,
        topic: &str,
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
                kv(metadata_keys::TOPIC, topic),
                kv(metadata_keys::FIRST_MESSAGE, first),
                kv(metadata_keys::LAST_MESSAGE, last),
            ]))
            .build())
    }

    /// Encodes the buffer off the runtime and puts it; retries the put until it succeeds.
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
        let (first_id, last_id, topic) =
            (first.display_id(), last.display_id(), first.topic.clone());
        let properties = self.properties(&first_id, &last_id, &topic)?;
        let batches = self.buffered.clone();
        let schema = self.schema.clone();
        let encoded = tokio::task::spawn_blocking(move || encode(schema, &batches, properties))
            .await
            .map_err(|e| SinkError::Fatal(format!("Parquet encoder task failed: {e}")))?
            .map_err(|e| SinkError::Fatal(format!("Parquet encoding failed: {e}")))?;
        let date = chrono::Utc::now().format("%Y-%m-%d");
        let file = format!(
            "part-{}-{}.parquet",
            self.instance,
            first_id.replace(':', "_")
        );
        let path = self
            .prefix
            .clone()
            .join(self.pipeline.as_str())
            .join(format!("dt={date}"))
            .join(file);
        let payload = PutPayload::from(encoded);
        let bytes = payload.content_length();
        let mut backoff = Backoff::default();
        loop {
            // A put is atomic on every backend (local disk writes a temporary file and
            // renames it), so a file is either complete or absent.
            match self.store.put(&path, payload.clone()).await {
                Ok(_) => break,
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
        tracing::info!(%path, rows = self.buffered_rows, bytes, first = %first_id, last = %last_id, "Parquet file committed");
        self.buffered.clear();
        self.buffered_rows = 0;
        self.opened_at = None;
        Ok(std::mem::take(&mut self.positions))
    }

    fn due_by_age(&self) -> bool {
        self.opened_at
            .is_some_and(|opened| opened.elapsed() >= self.config.rollover_interval)
    }
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

    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        if batch.positions.is_empty() {
            return Ok(Vec::new());
        }
        self.opened_at.get_or_insert_with(Instant::now);
        self.buffered_rows += batch.rows.num_rows();
        if batch.rows.num_rows() > 0 {
            self.buffered.push(batch.rows);
        }
        self.positions.extend(batch.positions);
        if self.buffered_rows >= self.config.rollover_rows || self.due_by_age() {
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
