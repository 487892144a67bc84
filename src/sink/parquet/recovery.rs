//! Exactly-once across crashes: what the committed files already hold.
//!
//! Every file records the batch it belongs to (`batch_id`, `batch_files`) and, per topic
//! partition, the first and last message id of that batch. On start a sink reads these
//! footers: complete batches give, per topic partition, the last message already committed
//! (redelivered messages up to it are dropped); files of an incomplete batch of this
//! instance (a crash between two puts) are deleted, so their rows are written once, again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::file::metadata::ParquetMetaDataReader;

use super::writer::metadata_keys;
use crate::source::MessagePosition;

/// Orders messages within one topic partition: ledger, entry, index in the producer batch.
pub type MessageKey = (u64, u64, i32);

/// The ordering key of a message.
pub fn message_key(position: &MessagePosition) -> MessageKey {
    (
        position.id.ledger_id,
        position.id.entry_id,
        position.id.batch_index.unwrap_or(-1),
    )
}

/// `ledger:entry:index` back to a key.
pub fn parse_key(text: &str) -> Option<MessageKey> {
    let mut parts = text.split(':');
    let key = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    parts.next().is_none().then_some(key)
}

/// What a sink learns at start.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Per topic partition, the last message already in a complete batch.
    pub committed: HashMap<String, MessageKey>,
    /// Files read.
    pub files: usize,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Files of incomplete batches of this instance that were deleted.
    pub removed: usize,
}

struct FileInfo {
    path: StorePath,
    batch: String,
    batch_files: usize,
    ranges: BTreeMap<String, (String, String)>,
}

/// Reads the footers of every Parquet file under `dir` and settles incomplete batches.
pub async fn recover(
    store: &Arc<dyn ObjectStore>,
    dir: &StorePath,
    instance: &str,
) -> Result<Recovered, String> {
    let listed: Vec<_> = store
        .list(Some(dir))
        .try_collect()
        .await
        .map_err(|e| format!("cannot list {dir}: {e}"))?;
    let mut files = Vec::new();
    let parquet: Vec<_> = listed
        .into_iter()
        .filter(|m| m.location.as_ref().ends_with(".parquet"))
        .collect();
    let bytes = parquet.iter().map(|m| m.size).sum();
    for meta in parquet {
        let kv = footer_metadata(store, &meta.location, meta.size).await?;
        let (Some(batch), Some(count), Some(ranges)) = (
            kv.get(metadata_keys::BATCH_ID),
            kv.get(metadata_keys::BATCH_FILES)
                .and_then(|n| n.parse().ok()),
            kv.get(metadata_keys::MESSAGE_RANGES)
                .and_then(|r| serde_json::from_str(r).ok()),
        ) else {
            tracing::warn!(path = %meta.location, "Parquet file without batch metadata; not used for recovery");
            continue;
        };
        files.push(FileInfo {
            path: meta.location,
            batch: batch.clone(),
            batch_files: count,
            ranges,
        });
    }
    let mut recovered = Recovered {
        files: files.len(),
        bytes,
        ..Default::default()
    };
    let mut per_batch: HashMap<&str, Vec<&FileInfo>> = HashMap::new();
    for file in &files {
        per_batch.entry(file.batch.as_str()).or_default().push(file);
    }
    for (batch, members) in per_batch {
        let expected = members[0].batch_files;
        if members.len() >= expected {
            for (topic, (_, last)) in &members[0].ranges {
                if let Some(key) = parse_key(last) {
                    let entry = recovered.committed.entry(topic.clone()).or_insert(key);
                    *entry = (*entry).max(key);
                }
            }
        } else if batch.starts_with(&format!("{instance}-")) {
            for file in members {
                store.delete(&file.path).await.map_err(|e| {
                    format!("cannot delete the incomplete batch file {}: {e}", file.path)
                })?;
                tracing::warn!(path = %file.path, batch, "deleted a file of an incomplete batch; its rows will be written again");
                recovered.removed += 1;
            }
        }
    }
    Ok(recovered)
}

/// The key-value metadata of a Parquet file, read from its footer only.
async fn footer_metadata(
    store: &Arc<dyn ObjectStore>,
    path: &StorePath,
    size: u64,
) -> Result<HashMap<String, String>, String> {
    let unreadable = |why: String| format!("cannot read the footer of {path}: {why}");
    if size < 12 {
        return Err(unreadable("file too small".into()));
    }
    let tail = store
        .get_range(path, size - 8..size)
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    if tail.len() != 8 || &tail[4..] != b"PAR1" {
        return Err(unreadable("not a Parquet file".into()));
    }
    let footer_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    let start = size
        .checked_sub(8 + footer_len)
        .ok_or_else(|| unreadable("footer longer than the file".into()))?;
    let footer = store
        .get_range(path, start..size - 8)
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    let metadata =
        ParquetMetaDataReader::decode_metadata(&footer).map_err(|e| unreadable(e.to_string()))?;
    Ok(metadata
        .file_metadata()
        .key_value_metadata()
        .map(|kvs| {
            kvs.iter()
                .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_order() {
        assert_eq!(parse_key("12:7:-1"), Some((12, 7, -1)));
        assert_eq!(parse_key("12:7"), None);
        assert!(parse_key("12:7:0").unwrap() > parse_key("12:7:-1").unwrap());
        assert!(parse_key("13:0:-1").unwrap() > parse_key("12:900:3").unwrap());
    }
}
