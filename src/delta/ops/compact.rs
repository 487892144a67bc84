//! `offline compact`: rewriting the small files a streaming sink makes in closed partitions
//! into large ones, committed as one version readers see as no data change.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{new_null_array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{Schema, SchemaRef};
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, Remove};
use deltalake::protocol::DeltaOperation;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;

use crate::delta::table::files::write_files;
use crate::delta::{ActiveFile, Table, TableError, DATE_COLUMN, HOUR_COLUMN};

/// Files to be rewritten into one.
#[derive(Debug, Clone)]
pub struct CompactionGroup {
    /// Their partition.
    pub partition: BTreeMap<String, Option<String>>,
    /// The files, smallest first.
    pub files: Vec<ActiveFile>,
}

/// When the partition `values` (`dt`, and `hr` when present) ends, epoch ms; `None` when the
/// values are not a date/hour.
pub fn partition_end_ms(values: &BTreeMap<String, Option<String>>) -> Option<i64> {
    let day = values.get(DATE_COLUMN)?.as_deref()?;
    let start = chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d")
        .ok()?
        .and_hms_opt(0, 0, 0)?
        .and_utc()
        .timestamp_millis();
    match values.get(HOUR_COLUMN) {
        Some(hour) => {
            let hour: i64 = hour.as_deref()?.parse().ok()?;
            Some(start + (hour + 1) * 3_600_000)
        }
        None => Some(start + 86_400_000),
    }
}

/// Groups the small files (below `target_bytes`) of partitions that ended at least
/// `older_than` before `now_ms`, packed into groups of about `target_bytes`; groups of one file
/// are left alone.
pub fn plan_compaction(
    files: &[ActiveFile],
    now_ms: i64,
    older_than: Duration,
    target_bytes: u64,
) -> Vec<CompactionGroup> {
    let cutoff = now_ms - i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    let mut by_partition: BTreeMap<&BTreeMap<String, Option<String>>, Vec<&ActiveFile>> =
        BTreeMap::new();
    for file in files {
        let closed = partition_end_ms(&file.partition).is_some_and(|end| end <= cutoff);
        if closed && file.size < target_bytes {
            by_partition.entry(&file.partition).or_default().push(file);
        }
    }
    let mut groups = Vec::new();
    for (partition, mut small) in by_partition {
        small.sort_by_key(|f| (f.size, f.path.clone()));
        let mut current: Vec<ActiveFile> = Vec::new();
        let mut bytes = 0;
        for file in small {
            if !current.is_empty() && bytes + file.size > target_bytes {
                if current.len() > 1 {
                    groups.push(CompactionGroup {
                        partition: partition.clone(),
                        files: std::mem::take(&mut current),
                    });
                }
                current.clear();
                bytes = 0;
            }
            bytes += file.size;
            current.push(file.clone());
        }
        if current.len() > 1 {
            groups.push(CompactionGroup {
                partition: partition.clone(),
                files: current,
            });
        }
    }
    groups
}

/// Rewrites each group into one file and commits all of it as one version that readers
/// see as no data change; the connector's appends commit alongside it unharmed.
pub async fn compact(
    table: &mut Table,
    groups: &[CompactionGroup],
    properties: WriterProperties,
    progress: impl Fn(usize),
) -> Result<u64, TableError> {
    let schema = table.arrow_schema()?;
    let full = table.load_full().await?;
    let mut actions: Vec<Action> = Vec::new();
    let mut done = 0;
    for group in groups {
        let mut batches = Vec::new();
        for file in &group.files {
            batches.extend(read_file(table.store(), file, &schema).await?);
            done += 1;
            progress(done);
        }
        let adds = write_files(table.files_table().await?, batches, properties.clone())
            .await
            .map_err(|source| TableError::Delta {
                what: "writing a compacted file",
                source,
            })?;
        actions.extend(adds.into_iter().map(|add| {
            Action::Add(Add {
                data_change: false,
                ..add
            })
        }));
        let now = chrono::Utc::now().timestamp_millis();
        actions.extend(group.files.iter().map(|file| {
            Action::Remove(Remove {
                deletion_timestamp: Some(now),
                ..file.remove.clone()
            })
        }));
    }
    let state = full
        .snapshot()
        .map_err(TableError::delta("reading the table"))?;
    let finalized = CommitBuilder::from(
        CommitProperties::default()
            .with_create_checkpoint(false)
            .with_cleanup_expired_logs(Some(false))
            .with_max_retries(20),
    )
    .with_actions(actions)
    .build(
        Some(state),
        table.log_store(),
        DeltaOperation::Optimize {
            predicate: None,
            target_size: 0,
        },
    )
    .await
    .map_err(TableError::delta("committing the compaction"))?;
    table.refresh().await?;
    Ok(finalized.version())
}

/// A data file's rows in the table's file schema (partition columns added back from the
/// file's partition values, columns the file lacks as nulls).
async fn read_file(
    store: &Arc<dyn ObjectStore>,
    file: &ActiveFile,
    table: &SchemaRef,
) -> Result<Vec<RecordBatch>, TableError> {
    let failed = |why: String| TableError::Refused(format!("reading {}: {why}", file.path));
    let bytes = store
        .get(&StorePath::from(file.path.as_str()))
        .await
        .map_err(|e| failed(e.to_string()))?
        .bytes()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let (table, partition) = (table.clone(), file.partition.clone());
    tokio::task::spawn_blocking(move || {
        ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|builder| builder.build())
            .map_err(|e| e.to_string())?
            .map(|batch| {
                conform(&batch.map_err(|e| e.to_string())?, &table, &partition)
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()
    })
    .await
    .map_err(|e| failed(e.to_string()))?
    .map_err(failed)
}

fn conform(
    batch: &RecordBatch,
    table: &Schema,
    partition: &BTreeMap<String, Option<String>>,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let rows = batch.num_rows();
    let columns = table
        .fields()
        .iter()
        .map(|field| -> Result<ArrayRef, arrow::error::ArrowError> {
            if let Some(value) = partition.get(field.name()) {
                let text: ArrayRef = Arc::new(StringArray::from(vec![value.clone(); rows]));
                return arrow::compute::cast(&text, field.data_type());
            }
            match batch.column_by_name(field.name()) {
                Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
                Some(column) => arrow::compute::cast(column, field.data_type()),
                None => Ok(new_null_array(field.data_type(), rows)),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(Arc::new(table.clone()), columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64, day: &str, hour: &str) -> ActiveFile {
        let partition: BTreeMap<String, Option<String>> = [
            (DATE_COLUMN.to_string(), Some(day.to_string())),
            (HOUR_COLUMN.to_string(), Some(hour.to_string())),
        ]
        .into_iter()
        .collect();
        ActiveFile {
            path: path.into(),
            size,
            rows: None,
            remove: Remove {
                path: path.into(),
                data_change: false,
                deletion_timestamp: None,
                extended_file_metadata: None,
                partition_values: None,
                size: None,
                tags: None,
                deletion_vector: None,
                base_row_id: None,
                default_row_commit_version: None,
            },
            partition,
        }
    }

    #[test]
    fn closed_partitions_small_files_packed_to_the_target() {
        // 2026-01-01T10:00Z .. 11:00Z and 11:00Z .. 12:00Z
        let files = vec![
            file("a", 40, "2026-01-01", "10"),
            file("b", 30, "2026-01-01", "10"),
            file("c", 50, "2026-01-01", "10"),
            file("big", 500, "2026-01-01", "10"),
            file("d", 10, "2026-01-01", "11"),
            file("e", 10, "2026-01-01", "11"),
        ];
        let eleven_thirty = 1_767_267_000_000;
        let hour = Duration::from_secs(3600);
        // At 11:30 with older_than 0 only hour 10 is closed; 100 bytes fit 30+40, then 50 alone.
        let groups = plan_compaction(&files, eleven_thirty, Duration::ZERO, 100);
        let paths: Vec<Vec<&str>> = groups
            .iter()
            .map(|g| g.files.iter().map(|f| f.path.as_str()).collect())
            .collect();
        assert_eq!(paths, vec![vec!["b", "a"]]);
        // An hour later both are closed, but not with older_than 1h for hour 11.
        let groups = plan_compaction(&files, eleven_thirty + 3_600_000, hour, 400);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].files.len(), 3, "big is not small");
        let groups = plan_compaction(&files, eleven_thirty + 7_200_000, hour, 400);
        assert_eq!(groups.len(), 2);
    }

    #[test]
    fn partition_ends_by_day_or_hour() {
        let mut values = BTreeMap::new();
        values.insert(DATE_COLUMN.to_string(), Some("2026-01-01".to_string()));
        assert_eq!(partition_end_ms(&values), Some(1_767_312_000_000));
        values.insert(HOUR_COLUMN.to_string(), Some("23".to_string()));
        assert_eq!(partition_end_ms(&values), Some(1_767_312_000_000));
        values.insert(HOUR_COLUMN.to_string(), Some("x".to_string()));
        assert_eq!(partition_end_ms(&values), None);
    }
}
