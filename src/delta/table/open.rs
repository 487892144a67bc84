//! Opening a pipeline's table: load its snapshot, or create it, or add the columns a changed
//! pipeline schema needs; refuse what the table cannot take.

use arrow::datatypes::Schema;
use delta_kernel::{Snapshot, SnapshotRef};
use deltalake::kernel::engine::arrow_conversion::TryIntoArrow;
use deltalake::kernel::StructField;
use deltalake::protocol::SaveMode;
use deltalake::{DeltaTable, TableProperty};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as StorePath;

use super::error::{blocking, TableError};
use super::layout::LayoutError;
use super::schema as types;
use super::store::TableLocation;

/// What opening the table did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// The table existed and takes the pipeline schema as it is.
    Existing,
    /// The table was created (version 0).
    Created,
    /// Columns were added for fields the pipeline schema gained.
    Evolved(Vec<String>),
}

/// The table's newest snapshot (protocol, metadata, log segment; no file list).
pub(crate) async fn load_snapshot(location: &TableLocation) -> Result<SnapshotRef, TableError> {
    let engine = location.log_store.engine(None);
    let url = location.url.to_string();
    blocking("reading the table's log", move || {
        Snapshot::builder_for(url).build(engine.as_ref())
    })
    .await
}

/// Whether the table's log has a commit (a listing of `_delta_log` only; used when the
/// snapshot could not be loaded). Only a commit file (`<20 digits>.json`) counts: another
/// writer creating the table leaves a temporary file there first.
pub(crate) async fn has_log(location: &TableLocation) -> Result<bool, TableError> {
    let log = StorePath::from("_delta_log");
    let mut listing = location.store.list(Some(&log));
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(|e| TableError::Delta {
            what: "listing the table's log",
            source: e.into(),
        })?;
        if meta.location.filename().is_some_and(is_commit_file) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `name` is a Delta commit file: the version in 20 digits, then `.json`.
fn is_commit_file(name: &str) -> bool {
    name.strip_suffix(".json")
        .is_some_and(|version| version.len() == 20 && version.bytes().all(|b| b.is_ascii_digit()))
}

pub(crate) async fn create(
    location: &TableLocation,
    pipeline: &str,
    desired: &Schema,
    partition_columns: &[String],
    checkpoint_interval: u64,
    stats_columns: &[String],
) -> Result<Opened, TableError> {
    let columns = types::kernel_schema(desired)
        .map_err(|e| TableError::Refused(e.to_string()))?
        .fields()
        .cloned()
        .collect::<Vec<StructField>>();
    let created = DeltaTable::new(location.log_store.clone())
        .create()
        .with_table_name(pipeline)
        .with_comment("written by feature-connector")
        .with_columns(columns)
        .with_partition_columns(partition_columns.to_vec())
        .with_configuration_property(
            TableProperty::CheckpointInterval,
            Some(checkpoint_interval.to_string()),
        )
        // Statistics (kept per file in the log and in every checkpoint) for the columns that
        // prune reads: entity keys and the two times. Statistics of every feature column would
        // make the log several times larger, and start-up and checkpoints slower with it.
        .with_configuration_property(
            TableProperty::DataSkippingStatsColumns,
            Some(stats_columns.join(",")),
        )
        .with_save_mode(SaveMode::ErrorIfExists)
        .await;
    match created {
        Ok(_) => Ok(Opened::Created),
        // Another replica created it first: use theirs (and check it as an existing table).
        Err(_) if has_log(location).await? => {
            let snapshot = load_snapshot(location).await?;
            evolve(location, &snapshot, desired, partition_columns).await
        }
        Err(source) => Err(TableError::Delta {
            what: "creating the table",
            source,
        }),
    }
}

pub(crate) async fn evolve(
    location: &TableLocation,
    snapshot: &SnapshotRef,
    desired: &Schema,
    partition_columns: &[String],
) -> Result<Opened, TableError> {
    let have = snapshot
        .table_configuration()
        .logical_partition_columns()
        .to_vec();
    if have != partition_columns {
        return Err(TableError::Refused(format!(
            "the table is partitioned by {have:?} but the pipeline asks for {partition_columns:?} (offline.partition_granularity); keep the granularity or write to a new offline url"
        )));
    }
    let existing: Schema = snapshot
        .schema()
        .as_ref()
        .try_into_arrow()
        .map_err(|e: arrow::error::ArrowError| TableError::Refused(e.to_string()))?;
    let evolved = types::evolve(&existing, desired).map_err(|e| match e {
        LayoutError::Schema(why) => TableError::Refused(why),
        other => TableError::Refused(other.to_string()),
    })?;
    let Some(evolved) = evolved else {
        return Ok(Opened::Existing);
    };
    let changed: Vec<arrow::datatypes::Field> = evolved
        .fields()
        .iter()
        .filter(|f| existing.field_with_name(f.name()).ok() != Some(f.as_ref()))
        .map(|f| f.as_ref().clone())
        .collect();
    let names: Vec<String> = changed.iter().map(|f| f.name().clone()).collect();
    let fields = types::kernel_schema(&Schema::new(changed))
        .map_err(|e| TableError::Refused(e.to_string()))?
        .fields()
        .cloned()
        .collect::<Vec<StructField>>();
    // Rare (a schema change): the one place that loads the table with its file list.
    let mut table = DeltaTable::new(location.log_store.clone());
    table
        .load()
        .await
        .map_err(TableError::delta("reading the table"))?;
    table
        .add_columns()
        .with_fields(fields)
        .await
        .map_err(TableError::delta("adding columns for new fields"))?;
    Ok(Opened::Evolved(names))
}

/// A table-less folder holding Parquet files was written by the earlier format (one file per
/// rollover, positions in the footers): mixing it into a table would duplicate or hide rows.
/// Listing happens only here, once, when the table does not exist yet.
pub(crate) async fn refuse_legacy_files(
    location: &TableLocation,
    pipeline: &str,
) -> Result<(), TableError> {
    let mut listing = location.store.list(None);
    let mut found = 0usize;
    while let Some(meta) = listing.try_next().await.map_err(|e| TableError::Delta {
        what: "checking the table's folder",
        source: e.into(),
    })? {
        if meta.location.as_ref().ends_with(".parquet") {
            found += 1;
        }
    }
    if found == 0 {
        return Ok(());
    }
    Err(TableError::Refused(format!(
        "{} holds {found} Parquet file(s) of the earlier offline format (no _delta_log): run `feature-connector offline upgrade --pipeline {pipeline}` to turn them into a Delta table (each row once, positions kept), or move them away",
        location.url
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_commit_files_make_a_log() {
        assert!(super::is_commit_file("00000000000000000000.json"));
        assert!(!super::is_commit_file(".tmp_00000000000000000000.json"));
        assert!(!super::is_commit_file("_last_checkpoint"));
        assert!(!super::is_commit_file("0.json"));
    }
}
