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

mod compute;
mod output;
mod scan;
pub mod spine;
pub mod sql;

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::error::ArrowError;

use crate::aggregate::{longest_hop_ms, longest_reach_ms, Aggregation, Output};
use crate::delta::read::FileReadError;
use crate::delta::{Table, TableError};

use compute::compute;
pub use output::write_parquet;
pub use scan::ScanCount;
use scan::{scan_events, EntityIndex, EventRows, ScanPlan};
use spine::Spine;

/// Why a training set could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TrainingError {
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

/// Where a pipeline's aggregations find their events in its table.
#[derive(Debug, Clone)]
pub struct EventSource {
    /// Join key columns.
    pub keys: Vec<String>,
    /// Event-time column.
    pub event_time: String,
    /// The aggregations, in the pipeline's order.
    pub aggregations: Vec<Aggregation>,
    /// How far ahead of its publish time an event may be stamped.
    pub max_future_skew_ms: i64,
    /// `true` when the table is partitioned by ingest time, not event time.
    pub partitioned_by_ingest: bool,
}

/// Aggregated values point in time and what computing them read.
pub struct PointInTime {
    /// Per (entity, time) pair asked, per aggregation, its windows' values.
    pub values: Vec<Vec<Vec<Output>>>,
    /// Files and rows read.
    pub read: ScanCount,
    /// Distinct entities asked.
    pub entities: usize,
    /// Table rows of those entities in the time range read.
    pub events: usize,
}

/// The training set of the aggregations of `source` for `spine`, from `table`.
pub async fn training_set(
    table: &Table,
    source: &EventSource,
    spine: Spine,
) -> Result<TrainingSet, TrainingError> {
    let point_in_time = values_at(table, source, &spine.keys, &spine.times).await?;
    let rows = features_of(&source.aggregations, &spine, point_in_time.values)?;
    Ok(TrainingSet {
        rows,
        read: point_in_time.read,
        entities: point_in_time.entities,
        events: point_in_time.events,
    })
}

/// Every aggregated value of `source` for each entity of `keys` (key values as text joined
/// by [`spine::KEY_SEPARATOR`]) at the time beside it in `times`, as the online store
/// served it then, from `table`.
pub async fn values_at(
    table: &Table,
    source: &EventSource,
    keys: &[String],
    times: &[i64],
) -> Result<PointInTime, TrainingError> {
    let aggregations = source.aggregations.clone();
    let skew = source.max_future_skew_ms;
    let reach = longest_reach_ms(&aggregations);
    let longest_hop = longest_hop_ms(&aggregations);
    let (first, last) = (
        times.iter().copied().min().unwrap_or(0),
        times.iter().copied().max().unwrap_or(0),
    );
    // A window read at t covers event times from t − window − hop, up to the end of t's
    // tile; events published by t are stamped at most `skew` after it.
    let from = first.saturating_sub(reach);
    let until = last.saturating_add(longest_hop.min(skew)).saturating_add(1);
    let (entities, entity_of_row) = EntityIndex::of(keys);
    let plan = Arc::new(ScanPlan {
        keys: source.keys.clone(),
        event_time: source.event_time.clone(),
        aggregations: aggregations.clone(),
        entities,
        event_times: (from, until),
        ingested_after: source
            .partitioned_by_ingest
            .then(|| from.saturating_sub(skew)),
    });
    let started = Instant::now();
    let files = table.active_files().await?;
    let (events, read) = scan_events(table, files, plan.clone()).await?;
    let event_count = events.iter().map(EventRows::len).sum();
    tracing::debug!(
        files = read.files_read,
        rows = read.rows_read,
        events = event_count,
        seconds = started.elapsed().as_secs_f64(),
        "read the events of the entities asked"
    );
    let entities = plan.entities.len();
    let times = times.to_vec();
    let started = Instant::now();
    let values = tokio::task::spawn_blocking(move || {
        compute(&aggregations, &times, &entity_of_row, entities, events)
    })
    .await??;
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        "computed the values point in time"
    );
    Ok(PointInTime {
        values,
        read,
        entities,
        events: event_count,
    })
}

/// The spine's columns followed by one column per aggregated feature.
fn features_of(
    aggregations: &[Aggregation],
    spine: &Spine,
    values: Vec<Vec<Vec<Output>>>,
) -> Result<RecordBatch, ArrowError> {
    let mut columns = Vec::new();
    for (index, aggregation) in aggregations.iter().enumerate() {
        let data_type = aggregation.output_type();
        for (window, name) in aggregation.feature_names().into_iter().enumerate() {
            let column = values
                .iter()
                .map(|row| row.get(index).and_then(|windows| windows.get(window)))
                .collect::<Option<Vec<&Output>>>()
                .ok_or_else(|| {
                    ArrowError::ComputeError(format!("a row has no value of `{name}`"))
                })?;
            columns.push((name, output::feature_column(&data_type, &column)?));
        }
    }
    output::with_features(&spine.rows, columns)
}
