//! Training sets point in time: for each row of an entity file (join keys and a
//! timestamp), every aggregated feature as the online store would have served it at that
//! timestamp, computed from the pipeline's Delta table of raw events.
//!
//! The events go through the same tiles the online store keeps, in publish order, up to
//! each timestamp ([`crate::aggregate::values_at_times`]), so an event published after a
//! timestamp does not count at it, late events are dropped as online, and floats add up in
//! the same order. Only active files whose partitions can hold events the windows cover
//! are read, only the key, time and aggregated columns, and only the entity file's
//! entities' rows are kept (`scan.rs`). [`sql`] prints the same computation for DuckDB and
//! Spark.

mod output;
mod scan;
pub mod spine;
pub mod sql;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::error::ArrowError;

use crate::aggregate::{longest_hop_ms, longest_reach_ms, values_at_times, Aggregation, Output};
use crate::config::{PipelineConfig, DEFAULT_FUTURE_SKEW_MS};
use crate::delta::read::FileReadError;
use crate::delta::{PartitionTime, Table, TableError};

pub use output::write_parquet;
pub use scan::ScanCount;
use scan::{scan_events, EntityKey, ScanPlan};
use spine::Spine;

/// Why a training set could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TrainingError {
    /// The pipeline declares no aggregations.
    #[error("pipeline `{0}` has no aggregations")]
    NoAggregations(String),
    /// The table's log could not be read.
    #[error("offline table: {0}")]
    TableLog(#[from] TableError),
    /// A data file could not be read.
    #[error("offline table: {0}")]
    TableFile(#[from] FileReadError),
    /// The output could not be put together.
    #[error("training set: {0}")]
    Arrow(#[from] ArrowError),
    /// The computation's thread failed.
    #[error("training set: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A training set and what making it read.
pub struct TrainingSet {
    /// The entity file's columns, then one column per aggregated feature.
    pub rows: RecordBatch,
    /// Files and rows read.
    pub read: ScanCount,
    /// Distinct entities of the entity file.
    pub entities: usize,
    /// Table rows of those entities in the time range read.
    pub events: usize,
}

/// The training set of `pipeline`'s aggregations for `spine`, from `table`.
pub async fn training_set(
    table: &Table,
    pipeline: &PipelineConfig,
    spine: Spine,
) -> Result<TrainingSet, TrainingError> {
    let aggregations = pipeline.aggregations.clone();
    if aggregations.is_empty() {
        return Err(TrainingError::NoAggregations(pipeline.name.clone()));
    }
    let skew = pipeline
        .max_future_skew_ms
        .unwrap_or(DEFAULT_FUTURE_SKEW_MS);
    let reach = longest_reach_ms(&aggregations);
    let longest_hop = longest_hop_ms(&aggregations);
    let (first, last) = (
        spine.times.iter().copied().min().unwrap_or(0),
        spine.times.iter().copied().max().unwrap_or(0),
    );
    // A window read at t covers event times from t − window − hop, up to the end of t's
    // tile; events published by t are stamped at most `skew` after it.
    let from = first.saturating_sub(reach);
    let until = last.saturating_add(longest_hop.min(skew)).saturating_add(1);
    let by_ingest = pipeline
        .sinks
        .offline
        .as_ref()
        .is_some_and(|o| o.partition_by == PartitionTime::IngestTime);
    let entities: HashSet<EntityKey> = spine.keys.iter().cloned().collect();
    let plan = Arc::new(ScanPlan {
        keys: pipeline.entity_keys.clone(),
        event_time: pipeline.event_time.clone(),
        aggregations: aggregations.clone(),
        entities,
        event_times: (from, until),
        ingested_after: by_ingest.then(|| from.saturating_sub(skew)),
    });
    let files = table.active_files().await?;
    let (events, read) = scan_events(table, files, plan.clone()).await?;
    let event_count = events.values().map(Vec::len).sum();
    let entities = plan.entities.len();
    let rows = tokio::task::spawn_blocking(move || compute(&aggregations, spine, events)).await??;
    Ok(TrainingSet {
        rows,
        read,
        entities,
        events: event_count,
    })
}

/// Every spine row's features from its entity's events.
fn compute(
    aggregations: &[Aggregation],
    spine: Spine,
    mut events: HashMap<EntityKey, Vec<Vec<crate::aggregate::Event>>>,
) -> Result<RecordBatch, ArrowError> {
    let specs: Vec<_> = aggregations.iter().map(|a| a.spec.clone()).collect();
    let mut rows_of: HashMap<&EntityKey, Vec<usize>> = HashMap::new();
    for (row, key) in spine.keys.iter().enumerate() {
        rows_of.entry(key).or_default().push(row);
    }
    let mut values: Vec<Vec<Output>> = vec![Vec::new(); spine.times.len()];
    for (key, rows) in rows_of {
        let times: Vec<i64> = rows.iter().map(|&r| spine.times[r]).collect();
        let mut mine = events.remove(key).unwrap_or_default();
        for (row, outputs) in rows.iter().zip(values_at_times(&specs, &mut mine, &times)) {
            values[*row] = outputs;
        }
    }
    let mut columns = Vec::new();
    let mut index = 0;
    for aggregation in aggregations {
        let data_type = aggregation.output_type();
        for name in aggregation.feature_names() {
            let column: Vec<&Output> = values.iter().map(|row| &row[index]).collect();
            columns.push((name, output::feature_column(&data_type, &column)?));
            index += 1;
        }
    }
    output::with_features(&spine.rows, columns)
}
