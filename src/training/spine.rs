//! The entity file of a training set (its "spine"): rows of join keys and a timestamp, read
//! from Parquet or CSV; every column is kept for the output.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::record::{event_time_millis, KeyText};

/// An entity file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SpineError {
    /// The file cannot be opened or read.
    #[error("{file}: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A column the training set needs is not there.
    #[error("{file}: no column `{column}` (has: {has})")]
    MissingColumn {
        /// The file.
        file: PathBuf,
        /// The column.
        column: String,
        /// The columns it has.
        has: String,
    },
    /// A row without a key or timestamp.
    #[error("{file}: row {row} has no {what}")]
    MissingValue {
        /// The file.
        file: PathBuf,
        /// The row, from 1.
        row: usize,
        /// `timestamp` or the key.
        what: String,
    },
}

/// What joins the text of an entity's key values into one (a character no key holds in
/// practice, and no separator of the online layouts).
pub const KEY_SEPARATOR: &str = "\u{1f}";

/// The rows of an entity file.
pub struct Spine {
    /// Every column as read.
    pub rows: RecordBatch,
    /// Per row, its join key values as text, in the pipeline's key order, joined by
    /// [`KEY_SEPARATOR`].
    pub keys: Vec<String>,
    /// Per row, its timestamp in ms since 1970.
    pub times: Vec<i64>,
}

impl Spine {
    /// Reads `file` (`.csv`: a header line, types inferred; else Parquet), taking the
    /// pipeline's `keys` and the timestamp column `timestamp` (epoch ms or a timestamp type).
    pub fn read(file: &Path, keys: &[String], timestamp: &str) -> Result<Spine, SpineError> {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| SpineError::Read {
            file: file.to_path_buf(),
            source,
        };
        let is_csv = file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        let rows = if is_csv {
            read_csv(file).map_err(failed)?
        } else {
            read_parquet(file).map_err(failed)?
        };
        let (keys, times) = Self::keys_and_times(file, &rows, keys, timestamp)?;
        Ok(Spine { rows, keys, times })
    }

    /// Per row of `rows`, its key values as text and its timestamp in ms.
    fn keys_and_times(
        file: &Path,
        rows: &RecordBatch,
        keys: &[String],
        timestamp: &str,
    ) -> Result<KeysAndTimes, SpineError> {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| SpineError::Read {
            file: file.to_path_buf(),
            source,
        };
        let schema = rows.schema();
        let has = || {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            names.join(", ")
        };
        let column = |name: &str| {
            rows.column_by_name(name)
                .ok_or_else(|| SpineError::MissingColumn {
                    file: file.to_path_buf(),
                    column: name.to_string(),
                    has: has(),
                })
        };
        let time_column = column(timestamp)?;
        let key_columns = keys
            .iter()
            .map(|k| column(k))
            .collect::<Result<Vec<_>, _>>()?;
        let key_text = KeyText::new(key_columns.clone()).map_err(|e| failed(e.into()))?;
        let missing = |row: usize, what: &str| SpineError::MissingValue {
            file: file.to_path_buf(),
            row: row + 1,
            what: what.to_string(),
        };
        let mut times = Vec::with_capacity(rows.num_rows());
        let mut key_values = Vec::with_capacity(rows.num_rows());
        for row in 0..rows.num_rows() {
            let at = event_time_millis(time_column, row).ok_or_else(|| {
                missing(
                    row,
                    &format!("timestamp `{timestamp}` (epoch ms or a timestamp)"),
                )
            })?;
            times.push(at);
            if let Some((_, key)) = key_columns
                .iter()
                .zip(keys)
                .find(|(column, _)| column.is_null(row))
            {
                return Err(missing(row, &format!("`{key}`")));
            }
            let mut text = String::new();
            key_text
                .append(row, KEY_SEPARATOR, &mut text)
                .map_err(|e| failed(e.into()))?;
            key_values.push(text);
        }
        Ok((key_values, times))
    }
}

/// Per row, the key values as text; per row, the timestamp in ms.
type KeysAndTimes = (Vec<String>, Vec<i64>);

type Failure = Box<dyn std::error::Error + Send + Sync>;

fn read_csv(file: &Path) -> Result<RecordBatch, Failure> {
    let format = arrow_csv::reader::Format::default().with_header(true);
    let (schema, _) = format.infer_schema(File::open(file)?, Some(10_000))?;
    // Integer timestamps are epoch ms; text ones (RFC 3339) are inferred as timestamps.
    let schema = Arc::new(schema);
    let reader = arrow_csv::ReaderBuilder::new(schema.clone())
        .with_format(format)
        .with_batch_size(65_536)
        .build(File::open(file)?)?;
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    Ok(arrow::compute::concat_batches(&schema, &batches)?)
}

fn read_parquet(file: &Path) -> Result<RecordBatch, Failure> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(file)?)?;
    let schema = builder.schema().clone();
    let batches = builder.build()?.collect::<Result<Vec<_>, _>>()?;
    Ok(arrow::compute::concat_batches(&schema, &batches)?)
}
