//! Writing a rollover's rows as the table's data files: Hive-partitioned Parquet (`dt=…/hr=…`)
//! with each file's statistics in its Add action, through delta-rs's `RecordBatchWriter`;
//! and the table's active files as its state lists them.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Schema};
use deltalake::kernel::Add;
use deltalake::kernel::Remove;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::{BlindDeltaTable, DeltaTableError};
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::delta::{Compression, DeltaSinkConfig};

/// File-level metadata keys written into every Parquet file (for people reading a file on its
/// own; the table's log, not these, is what recovery reads).
pub mod metadata_keys {
    /// The pipeline that wrote the file.
    pub const PIPELINE: &str = "feature_connector.pipeline";
    /// Rabin fingerprint (hex) of the pipeline's reader schema.
    pub const SCHEMA_FINGERPRINT: &str = "feature_connector.schema_fingerprint";
    /// Per topic partition, `[first, last]` message id of the rollover (JSON).
    pub const MESSAGE_RANGES: &str = "feature_connector.message_ranges";
}

/// Largest dictionary a column chunk keeps before the writer falls back to plain encoding
/// for the rest of it. Parquet's default (1 MiB) holds 131,072 distinct 8-byte values, more
/// than a rollover's rows, so a column whose values hardly repeat (ids, counters, free text)
/// was interned value by value into a dictionary larger than the plain column: 1M bench
/// events drained with 64 KiB instead (`bench/drain.py`, alternated, three each): connector
/// 2.70–2.83 → 2.41–2.52 CPU µs per event, files 28.6 → 20.5 MB, RSS peak 140–144 → 123–125
/// MB. Columns with a few thousand distinct values (categories, small counts) stay
/// dictionary-encoded.
const DICTIONARY_PAGE_LIMIT_BYTES: usize = 64 * 1024;

/// Parquet settings of a pipeline's files.
pub fn writer_properties(
    config: &DeltaSinkConfig,
    metadata: Vec<(String, String)>,
) -> Result<WriterProperties, parquet::errors::ParquetError> {
    parquet_properties(
        config.compression,
        config.zstd_level,
        config.row_group_rows,
        metadata,
    )
}

/// Parquet settings of a table's files: `compression` (at `zstd_level` for Zstandard),
/// `row_group_rows` rows per row group, `metadata` in the footer.
pub fn parquet_properties(
    compression: Compression,
    zstd_level: i32,
    row_group_rows: usize,
    metadata: Vec<(String, String)>,
) -> Result<WriterProperties, parquet::errors::ParquetError> {
    let compression = match compression {
        Compression::Zstd => ParquetCompression::ZSTD(ZstdLevel::try_new(zstd_level)?),
        Compression::Snappy => ParquetCompression::SNAPPY,
        Compression::Lz4 => ParquetCompression::LZ4_RAW,
        Compression::None => ParquetCompression::UNCOMPRESSED,
    };
    Ok(WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_dictionary_enabled(true)
        .set_dictionary_page_size_limit(DICTIONARY_PAGE_LIMIT_BYTES)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_key_value_metadata(Some(
            metadata
                .into_iter()
                .map(|(k, v)| KeyValue::new(k, v))
                .collect(),
        ))
        .build())
}

/// Dictionary encoding pays for columns whose values repeat (keys, categories, counts);
/// measured values and timestamps rarely repeat, so interning each of them cost CPU (about
/// 7 % of the connector's in profiling round 5) for no smaller file.
fn no_dictionary_for_continuous_values(
    properties: WriterProperties,
    schema: &Schema,
) -> WriterProperties {
    schema
        .fields()
        .iter()
        .filter(|field| {
            matches!(
                field.data_type(),
                DataType::Float16
                    | DataType::Float32
                    | DataType::Float64
                    | DataType::Timestamp(_, _)
                    | DataType::Date64
            )
        })
        .fold(properties.into_builder(), |builder, field| {
            builder.set_column_dictionary_enabled(ColumnPath::from(field.name().as_str()), false)
        })
        .build()
}

/// Writes `batches` (table rows, partition columns included) as new data files of `table`
/// and returns their Add actions. Nothing is committed: files of a rollover whose commit never
/// lands are never read, and `offline vacuum` deletes them.
///
/// Encoding is CPU work, so it runs on the blocking pool; the uploads it makes go through the
/// runtime from there.
pub async fn write_files(
    table: &BlindDeltaTable,
    batches: Vec<RecordBatch>,
    properties: WriterProperties,
) -> Result<Vec<Add>, DeltaTableError> {
    let properties = match batches.first() {
        Some(batch) => no_dictionary_for_continuous_values(properties, batch.schema_ref()),
        None => properties,
    };
    let mut writer =
        RecordBatchWriter::for_blind_appends(table)?.with_writer_properties(properties);
    let runtime = tokio::runtime::Handle::current();
    let batches = Arc::new(batches);
    tokio::task::spawn_blocking(move || {
        runtime.block_on(async move {
            for batch in batches.iter() {
                writer.write(batch.clone()).await?;
            }
            writer.flush().await
        })
    })
    .await
    .map_err(|e| DeltaTableError::Generic(format!("Parquet encoder task failed: {e}")))?
}

/// Data files and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FileCount {
    /// Files.
    pub files: usize,
    /// Their total size.
    pub bytes: u64,
}

impl FileCount {
    /// The files and bytes of `files`.
    pub fn of(files: &[ActiveFile]) -> Self {
        let mut count = Self::default();
        for file in files {
            count.add(file.size);
        }
        count
    }

    pub(crate) fn add(&mut self, bytes: u64) {
        self.files += 1;
        self.bytes += bytes;
    }
}

/// One active data file of the table.
#[derive(Debug, Clone)]
pub struct ActiveFile {
    /// Path relative to the table.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Partition column → value (as the log writes it).
    pub partition: BTreeMap<String, Option<String>>,
    /// Rows, when the file's statistics say.
    pub rows: Option<usize>,
    pub(crate) remove: Remove,
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{Field, TimeUnit};

    use super::*;

    #[test]
    fn dictionary_only_for_columns_whose_values_repeat() {
        let schema = Schema::new(vec![
            Field::new("country", DataType::Utf8, true),
            Field::new("clicks", DataType::Int64, true),
            Field::new("score", DataType::Float64, true),
            Field::new(
                "event_time",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
        ]);
        let properties = WriterProperties::builder()
            .set_dictionary_enabled(true)
            .build();
        let properties = no_dictionary_for_continuous_values(properties, &schema);
        let enabled = |name: &str| properties.dictionary_enabled(&ColumnPath::from(name));
        assert!(enabled("country") && enabled("clicks"));
        assert!(!enabled("score") && !enabled("event_time"));
    }

    /// A rollover's file, written with the pipeline's properties (uncompressed, so sizes
    /// compare encodings), with another dictionary limit when given.
    fn write_rollover(batch: &RecordBatch, dictionary_limit: Option<usize>) -> Vec<u8> {
        let config: DeltaSinkConfig =
            serde_saphyr::from_str("url: memory:///t\ncompression: none\n").unwrap();
        let mut properties = writer_properties(&config, Vec::new()).unwrap();
        if let Some(limit) = dictionary_limit {
            properties = properties
                .into_builder()
                .set_dictionary_page_size_limit(limit)
                .build();
        }
        let properties = no_dictionary_for_continuous_values(properties, batch.schema_ref());
        let mut file = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut file, batch.schema(), Some(properties))
                .unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        file
    }

    #[test]
    fn values_that_hardly_repeat_fall_back_to_plain_and_categories_keep_their_dictionary() {
        use arrow::array::{Int64Array, StringArray};
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::basic::Encoding;

        let rows = 50_000;
        let schema = Arc::new(Schema::new(vec![
            Field::new("last_item_id", DataType::Int64, false),
            Field::new("country", DataType::Utf8, false),
        ]));
        let ids = Int64Array::from_iter_values((0..rows).map(|i| i * 7_919));
        let countries =
            StringArray::from_iter_values((0..rows).map(|i| format!("country-{}", i % 200)));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(countries)]).unwrap();

        let file = write_rollover(&batch, None);
        let size = file.len();
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(file)).unwrap();
        let chunk = |column: usize| reader.metadata().row_group(0).column(column).clone();
        let data_pages = |column: usize| {
            chunk(column)
                .page_encoding_stats_mask()
                .map(|mask| mask.encodings().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert!(
            data_pages(0).contains(&Encoding::PLAIN),
            "{:?}",
            data_pages(0)
        );
        assert_eq!(data_pages(1), vec![Encoding::RLE_DICTIONARY]);
        let read: Vec<RecordBatch> = reader.build().unwrap().map(Result::unwrap).collect();
        assert_eq!(
            arrow::compute::concat_batches(&batch.schema(), &read).unwrap(),
            batch
        );

        // Parquet's default limit keeps all 50,000 distinct ids in a dictionary larger than
        // the plain column.
        let default_size = write_rollover(&batch, Some(1024 * 1024)).len();
        assert!(size < default_size, "{size} bytes against {default_size}");
    }
}
