//! Removing log files older than the table's log retention without listing the whole log:
//! delta-rs's `cleanup_expired_logs_for` lists every file of `_delta_log` at each checkpoint,
//! a cost (and a load on the store) that grows with the table's history.

use std::time::{Duration, Instant};

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// How often the sink looks for expired log files: retention is counted in days.
pub const CLEANUP_EVERY: Duration = Duration::from_secs(3600);

/// Remembers when the log was last cleaned.
#[derive(Debug, Default)]
pub struct CleanupSchedule {
    last: Option<Instant>,
}

impl CleanupSchedule {
    /// Whether a cleanup is due now (the first one is); marks it done if so.
    pub fn due(&mut self) -> bool {
        let due = self.last.is_none_or(|last| last.elapsed() >= CLEANUP_EVERY);
        if due {
            self.last = Some(Instant::now());
        }
        due
    }
}

/// Deletes the log files (commits, checkpoints, checksums) of versions before the newest
/// checkpoint that is itself older than `cutoff_ms` and not after `keep_version`: every
/// version still inside retention keeps a checkpoint to start from and the commits after it.
/// The log is listed in version order and the listing stops at the first file inside
/// retention, so a table whose oldest file is young costs one listing page. Returns how many
/// files were deleted.
pub async fn cleanup_expired_log(
    store: &dyn ObjectStore,
    keep_version: u64,
    cutoff_ms: i64,
) -> Result<usize, object_store::Error> {
    let log = Path::from("_delta_log");
    let mut expired: Vec<(u64, Path, bool)> = Vec::new();
    {
        let mut listing = store.list(Some(&log));
        while let Some(meta) = listing.next().await {
            let meta = meta?;
            let Some(name) = meta.location.filename() else {
                continue;
            };
            // `_last_checkpoint` and other names sort after the numbered files.
            let Some(version) = name.get(..20).and_then(|digits| digits.parse::<u64>().ok()) else {
                break;
            };
            if version > keep_version || meta.last_modified.timestamp_millis() >= cutoff_ms {
                break;
            }
            let checkpoint = name.contains(".checkpoint");
            expired.push((version, meta.location, checkpoint));
        }
    }
    let Some(safe) = expired
        .iter()
        .filter(|(_, _, checkpoint)| *checkpoint)
        .map(|(version, _, _)| *version)
        .max()
    else {
        return Ok(0);
    };
    let mut deleted = 0;
    for (version, path, _) in expired {
        if version < safe {
            match store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use object_store::memory::InMemory;
    use object_store::PutPayload;

    use super::*;

    async fn names(store: &InMemory) -> Vec<String> {
        let mut listing = store.list(Some(&Path::from("_delta_log")));
        let mut names = Vec::new();
        while let Some(meta) = listing.next().await {
            names.push(meta.unwrap().location.filename().unwrap().to_string());
        }
        names
    }

    async fn put(store: &InMemory, name: &str) {
        store
            .put(
                &Path::from(format!("_delta_log/{name}")),
                PutPayload::from(Bytes::from_static(b"{}")),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn keeps_every_version_from_the_newest_expired_checkpoint() {
        let store = InMemory::new();
        for version in 0..6u64 {
            put(&store, &format!("{version:020}.json")).await;
        }
        put(&store, &format!("{:020}.checkpoint.parquet", 2)).await;
        put(&store, &format!("{:020}.checkpoint.parquet", 4)).await;
        put(&store, "_last_checkpoint").await;
        let future = chrono::Utc::now().timestamp_millis() + 60_000;
        // Everything is older than the cutoff; the newest checkpoint at or before version 4 is 4.
        let deleted = cleanup_expired_log(&store, 4, future).await.unwrap();
        assert_eq!(deleted, 5, "{:?}", names(&store).await);
        let left = names(&store).await;
        assert_eq!(
            left.first().map(String::as_str),
            Some("00000000000000000004.checkpoint.parquet")
        );
        assert!(left.contains(&"00000000000000000004.json".to_string()));
        assert!(left.contains(&"_last_checkpoint".to_string()));
    }

    #[tokio::test]
    async fn young_files_are_kept() {
        let store = InMemory::new();
        for version in 0..3u64 {
            put(&store, &format!("{version:020}.json")).await;
        }
        put(&store, &format!("{:020}.checkpoint.parquet", 1)).await;
        let past = chrono::Utc::now().timestamp_millis() - 60_000;
        assert_eq!(cleanup_expired_log(&store, 2, past).await.unwrap(), 0);
        assert_eq!(names(&store).await.len(), 4);
    }

    #[test]
    fn the_first_cleanup_is_due_then_not_for_an_hour() {
        let mut schedule = CleanupSchedule::default();
        assert!(schedule.due());
        assert!(!schedule.due());
    }
}
