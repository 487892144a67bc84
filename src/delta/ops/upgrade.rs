//! `offline upgrade`: turns a folder of the earlier format (one Parquet file per rollover, its
//! batch and message ranges in the footer, no table) into the pipeline's Delta table in place.
//!
//! The rows of every complete rollover batch go into new data files committed as one version,
//! together with each topic partition's last converted message (so the connector skips them
//! when the broker redelivers); then the old files are deleted. Files of an incomplete batch
//! (a crash between two of its puts) were never acknowledged, so the broker redelivered their
//! messages: they are left for `offline vacuum`. Running it again after an interruption
//! finishes the job: files whose messages the table already holds are deleted, not converted.

use std::collections::{BTreeMap, HashMap};

use arrow::array::RecordBatch;
use bytes::Bytes;
use deltalake::kernel::Transaction;
use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;

use crate::delta::table::files::write_files;
use crate::delta::table::positions::transactions;
use crate::delta::{CommittedPositions, MessageKey, TableError, TableSpec};

/// What an upgrade did.
#[derive(Debug, Default, Clone)]
pub struct UpgradeReport {
    /// Old-format files found.
    pub legacy_files: usize,
    /// Their bytes.
    pub legacy_bytes: u64,
    /// Rows converted into the table.
    pub rows: usize,
    /// Old files deleted (converted now, or converted by an earlier, interrupted run).
    pub deleted: usize,
    /// Files of incomplete batches, left for vacuum.
    pub incomplete: Vec<String>,
    /// The table version the conversion committed, if any.
    pub version: Option<u64>,
}

struct LegacyFile {
    path: StorePath,
    size: u64,
    bytes: Bytes,
    batch: String,
    batch_files: usize,
    /// Per topic partition, the last message of the file's batch.
    last: BTreeMap<String, MessageKey>,
}

fn parse_id(text: &str) -> Option<MessageKey> {
    let mut parts = text.split(':');
    let key = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    parts.next().is_none().then_some(key)
}

async fn read_legacy(
    store: &std::sync::Arc<dyn ObjectStore>,
    path: StorePath,
    size: u64,
) -> Result<Option<LegacyFile>, TableError> {
    let failed = |why: String| TableError::Refused(format!("reading {path}: {why}"));
    let bytes = store
        .get(&path)
        .await
        .map_err(|e| failed(e.to_string()))?
        .bytes()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
        .map_err(|e| failed(e.to_string()))?;
    let kv: HashMap<String, String> = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .map(|kvs| {
            kvs.iter()
                .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
                .collect()
        })
        .unwrap_or_default();
    let (Some(batch), Some(batch_files), Some(ranges)) = (
        kv.get("feature_connector.batch_id").cloned(),
        kv.get("feature_connector.batch_files")
            .and_then(|n| n.parse().ok()),
        kv.get("feature_connector.message_ranges")
            .and_then(|r| serde_json::from_str::<BTreeMap<String, (String, String)>>(r).ok()),
    ) else {
        return Ok(None);
    };
    let last = ranges
        .into_iter()
        .filter_map(|(topic, (_, last))| Some((topic, parse_id(&last)?)))
        .collect();
    Ok(Some(LegacyFile {
        path,
        size,
        bytes,
        batch,
        batch_files,
        last,
    }))
}

/// Converts the old-format files in the folder of `spec`'s table (see the module docs).
pub async fn upgrade(
    spec: &TableSpec,
    properties: WriterProperties,
    progress: impl Fn(usize, usize),
) -> Result<UpgradeReport, TableError> {
    let store = spec.location.store.clone();
    let listed: Vec<_> = store
        .list(None)
        .try_collect()
        .await
        .map_err(|e| TableError::Refused(format!("listing {}: {e}", spec.location.url)))?;
    let candidates: Vec<_> = listed
        .into_iter()
        .filter(|m| {
            let path = m.location.as_ref();
            path.ends_with(".parquet") && !path.starts_with("_delta_log")
        })
        .collect();
    let (mut table, _) = spec.open_table(true).await?;
    let active: std::collections::HashSet<String> = table
        .active_files()
        .await?
        .into_iter()
        .map(|f| f.path)
        .collect();
    let mut report = UpgradeReport::default();
    let mut legacy = Vec::new();
    let total = candidates.len();
    for (done, meta) in candidates.into_iter().enumerate() {
        progress(done, total);
        if active.contains(meta.location.as_ref()) {
            continue;
        }
        if let Some(file) = read_legacy(&store, meta.location, meta.size).await? {
            report.legacy_files += 1;
            report.legacy_bytes += file.size;
            legacy.push(file);
        }
    }
    let mut per_batch: HashMap<&str, usize> = HashMap::new();
    for file in &legacy {
        *per_batch.entry(file.batch.as_str()).or_default() += 1;
    }
    let complete = |file: &LegacyFile| {
        per_batch.get(file.batch.as_str()).copied().unwrap_or(0) >= file.batch_files
    };
    // Positions the table holds already (an earlier run, or the connector since).
    let mut held = CommittedPositions::default();
    for file in &legacy {
        for partition in file.last.keys() {
            if !held.knows(partition) {
                held.set(partition, table.position(partition).await?);
            }
        }
    }
    let converted_before = |file: &LegacyFile| {
        file.last
            .iter()
            .all(|(partition, last)| held.get(partition).is_some_and(|h| *last <= h))
    };
    let layout = spec.layout(table.arrow_schema()?);
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut positions: BTreeMap<String, MessageKey> = BTreeMap::new();
    let mut convert = Vec::new();
    let mut delete = Vec::new();
    for file in &legacy {
        if !complete(file) {
            report.incomplete.push(file.path.to_string());
        } else if converted_before(file) {
            delete.push(file.path.clone());
        } else {
            convert.push(file);
        }
    }
    for file in &convert {
        let reader = ParquetRecordBatchReaderBuilder::try_new(file.bytes.clone())
            .and_then(|b| b.build())
            .map_err(|e| TableError::Refused(format!("reading {}: {e}", file.path)))?;
        for batch in reader {
            let batch =
                batch.map_err(|e| TableError::Refused(format!("reading {}: {e}", file.path)))?;
            report.rows += batch.num_rows();
            let rows = layout
                .to_table_rows(&batch, None, chrono::Utc::now().timestamp_millis())
                .map_err(|e| TableError::Refused(format!("converting {}: {e}", file.path)))?;
            batches.push(rows);
        }
        for (partition, last) in &file.last {
            let entry = positions.entry(partition.clone()).or_insert(*last);
            *entry = (*entry).max(*last);
        }
        delete.push(file.path.clone());
    }
    if !batches.is_empty() {
        let adds = write_files(table.files_table().await?, batches, properties)
            .await
            .map_err(|source| TableError::Delta {
                what: "writing the converted files",
                source,
            })?;
        let now = chrono::Utc::now().timestamp_millis();
        let txns: Vec<Transaction> = positions
            .iter()
            .filter(|(partition, last)| held.get(partition).is_none_or(|h| **last > h))
            .flat_map(|(partition, last)| transactions(partition, *last, now))
            .collect();
        let committed = table
            .commit(adds, txns)
            .await
            .map_err(|e| TableError::Refused(e.to_string()))?;
        report.version = Some(committed.version);
    }
    for path in delete {
        store
            .delete(&path)
            .await
            .map_err(|e| TableError::Refused(format!("deleting {path}: {e}")))?;
        report.deleted += 1;
    }
    progress(total, total);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::parse_id;

    #[test]
    fn old_footer_ids_parse() {
        assert_eq!(parse_id("12:7:-1"), Some((12, 7, -1)));
        assert_eq!(parse_id("12:7"), None);
        assert_eq!(parse_id("12:7:0:1"), None);
    }
}
