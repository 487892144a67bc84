//! Reading a table's data files: one file at a time with only the columns asked, rows
//! dropped early by a filter that sees a few columns, each record batch folded into a
//! caller's state on a blocking thread; and when a file's partition starts and ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::error::ArrowError;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::{ArrowPredicateFn, ParquetRecordBatchReaderBuilder, RowFilter};
use parquet::arrow::ProjectionMask;

use super::ops::partition_end_ms;
use super::HOUR_COLUMN;

/// A data file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading {path}: {source}")]
pub struct FileReadError {
    /// The file, relative to the table.
    pub path: String,
    /// Why (the store, the Parquet reader, or the reading task).
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// For each row of a batch, whether to keep it.
pub type KeepRows = Box<dyn FnMut(&RecordBatch) -> Result<BooleanArray, ArrowError> + Send>;

/// Which rows of a file are worth decoding whole, judged from `columns` alone.
pub struct RowsWanted {
    /// The columns the judgement needs.
    pub columns: Vec<String>,
    /// Judges the rows of a batch holding `columns`.
    pub keep: KeepRows,
}

/// Reads the file at `path` of `store` with only `columns` (and, with `wanted`, only the
/// rows it keeps), folding each record batch into `state` on a blocking thread; returns the
/// state and the rows read.
pub async fn fold_file<S, F>(
    store: Arc<dyn ObjectStore>,
    path: String,
    columns: Vec<String>,
    wanted: Option<RowsWanted>,
    mut state: S,
    fold: F,
) -> Result<(S, u64), FileReadError>
where
    S: Send + 'static,
    F: Fn(&RecordBatch, &mut S) -> Result<(), ArrowError> + Send + 'static,
{
    type Failure = Box<dyn std::error::Error + Send + Sync>;
    let failed = |source: Failure| FileReadError {
        path: path.clone(),
        source,
    };
    let bytes = store
        .get(&StorePath::from(path.as_str()))
        .await
        .map_err(|e| failed(e.into()))?
        .bytes()
        .await
        .map_err(|e| failed(e.into()))?;
    tokio::task::spawn_blocking(move || -> Result<(S, u64), Failure> {
        let mut builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
        let roots = |names: &[String], builder: &ParquetRecordBatchReaderBuilder<_>| {
            let indices: Vec<usize> = builder
                .schema()
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, field)| names.contains(field.name()))
                .map(|(index, _)| index)
                .collect();
            ProjectionMask::roots(builder.parquet_schema(), indices)
        };
        let mask = roots(&columns, &builder);
        if let Some(mut wanted) = wanted {
            let judged = roots(&wanted.columns, &builder);
            let predicate =
                ArrowPredicateFn::new(judged, move |batch: RecordBatch| (wanted.keep)(&batch));
            builder = builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]));
        }
        let reader = builder
            .with_projection(mask)
            .with_batch_size(16_384)
            .build()?;
        let mut read = 0;
        for batch in reader {
            let batch = batch?;
            read += batch.num_rows() as u64;
            fold(&batch, &mut state)?;
        }
        Ok((state, read))
    })
    .await
    .map_err(|e| failed(e.into()))?
    .map_err(failed)
}

/// When the partition `values` starts, epoch ms (its end less an hour or a day).
pub fn partition_start_ms(values: &BTreeMap<String, Option<String>>) -> Option<i64> {
    let span = if values.contains_key(HOUR_COLUMN) {
        3_600_000
    } else {
        86_400_000
    };
    partition_end_ms(values).map(|end| end - span)
}
