//! Committing to the table through the Delta kernel's transaction API: the files' Add actions
//! and the topic positions as application transactions, on top of the snapshot the sink holds.
//!
//! The kernel writes the commit with a conditional put: if any other writer committed that
//! version first, the commit reports a conflict and the sink refreshes, re-checks what the
//! table now holds and tries again (see [`super`]). Checkpoints are written in the background.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Int64Array, MapBuilder, RecordBatch, StringArray, StringBuilder, StructArray,
};
use arrow::datatypes::{DataType, Field, Fields, Schema};
use delta_kernel::committer::FileSystemCommitter;
use delta_kernel::engine::arrow_data::ArrowEngineData;
use delta_kernel::transaction::CommitResult;
use deltalake::kernel::{Add, Transaction};

use super::{blocking, Table, TableError};

/// How a commit ended when it did not land.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// Another writer committed the version first; refresh, re-check and try again.
    #[error("another writer committed version {0} first")]
    Conflict(u64),
    /// The store failed; the commit may or may not have landed (a refresh finds out).
    #[error("commit failed: {0}")]
    Failed(TableError),
}

/// What a successful commit reports.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    /// The table version it created.
    pub version: u64,
}

impl Table {
    /// Commits `adds` and `transactions` as the version after the one this table is at.
    pub async fn commit(
        &mut self,
        adds: Vec<Add>,
        transactions: Vec<Transaction>,
    ) -> Result<Committed, CommitError> {
        if self.reload.swap(false, std::sync::atomic::Ordering::SeqCst) {
            if let Err(e) = self.reload_snapshot().await {
                tracing::warn!(error = %e, "cannot reload the table onto its new checkpoint; trying again later");
                self.reload.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let files = adds_batch(&adds).map_err(|e| {
            CommitError::Failed(TableError::Refused(format!("describing the files: {e}")))
        })?;
        let (engine, snapshot) = (self.engine.clone(), self.snapshot.clone());
        let txns = transactions.clone();
        let result = blocking("committing", move || {
            let mut txn = snapshot
                .transaction(Box::new(FileSystemCommitter::new()), engine.as_ref())?
                .with_operation("WRITE".to_string())
                .with_engine_info(format!("feature-connector {}", env!("CARGO_PKG_VERSION")))
                .with_data_change(true);
            for t in txns {
                txn = txn.with_transaction_id(t.app_id, t.version);
            }
            txn.add_files(Box::new(ArrowEngineData::new(files)));
            txn.commit(engine.as_ref())
        })
        .await
        .map_err(CommitError::Failed)?;
        let committed = match result {
            CommitResult::CommittedTransaction(committed) => committed,
            CommitResult::ConflictedTransaction(conflict) => {
                return Err(CommitError::Conflict(conflict.conflict_version()))
            }
            CommitResult::RetryableTransaction(_) => {
                return Err(CommitError::Failed(TableError::Refused(
                    "the store failed while writing the commit".into(),
                )))
            }
        };
        let version = committed.commit_version();
        match committed.post_commit_snapshot() {
            Some(snapshot) => self.snapshot = snapshot.clone(),
            None => {
                if let Err(e) = self.refresh().await {
                    tracing::warn!(error = %e, "cannot read the table after committing; the next refresh catches up");
                }
            }
        }
        self.positions.apply(
            &transactions
                .into_iter()
                .map(deltalake::kernel::Action::Txn)
                .collect::<Vec<_>>(),
        );
        self.checkpoint_if_due(version);
        Ok(Committed { version })
    }

    /// Starts writing a checkpoint (and dropping log files older than the table's log
    /// retention) in the background when `version` completes an interval; a commit never waits
    /// for it. Only one runs at a time. The checkpoint is made from a snapshot loaded afresh
    /// (the previous checkpoint plus at most an interval of commits), and once it is written
    /// the sink's own snapshot is reloaded onto it before the next commit: snapshots that only
    /// ever grow by their own commits would keep every commit since start-up in their segment,
    /// and each checkpoint would read them all.
    fn checkpoint_if_due(&mut self, version: u64) {
        if !(version + 1).is_multiple_of(self.checkpoint_interval) {
            return;
        }
        if self
            .checkpoints
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let engine = self.engine.clone();
        // Expired log files are looked for at most hourly (see `log_cleanup`).
        let cleanup = self.cleanup.due().then(|| self.location.store.clone());
        let url = self.location.url.to_string();
        let reload = self.reload.clone();
        let retention_ms = i64::try_from(
            self.snapshot
                .table_properties()
                .log_retention_duration
                .unwrap_or(std::time::Duration::from_secs(30 * 86_400))
                .as_millis(),
        )
        .unwrap_or(i64::MAX);
        self.checkpoints = Some(tokio::spawn(async move {
            let started = std::time::Instant::now();
            let written = blocking("writing a checkpoint", move || {
                let snapshot = delta_kernel::Snapshot::builder_for(url)
                    .at_version(version)
                    .build(engine.as_ref())?;
                snapshot.checkpoint(engine.as_ref(), None).map(|_| ())
            })
            .await;
            match written {
                Ok(()) => {
                    reload.store(true, std::sync::atomic::Ordering::SeqCst);
                    tracing::info!(
                        version,
                        seconds = started.elapsed().as_secs_f64(),
                        "table checkpoint written"
                    );
                    if let Some(store) = cleanup {
                        let cutoff = chrono::Utc::now().timestamp_millis() - retention_ms;
                        match super::log_cleanup::cleanup_expired_log(
                            store.as_ref(),
                            version,
                            cutoff,
                        )
                        .await
                        {
                            Ok(0) => {}
                            Ok(deleted) => {
                                tracing::info!(deleted, "expired log files removed")
                            }
                            Err(e) => tracing::warn!(error = %e, "cannot remove expired log files"),
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, version, "cannot write a table checkpoint; start-up reads more commits until the next one")
                }
            }
        }));
    }

    /// Waits (at most `limit`) for a checkpoint being written, so that a shutdown does not cut
    /// it off and the next start reads it.
    pub async fn finish_checkpoint(&mut self, limit: std::time::Duration) {
        if let Some(task) = self.checkpoints.take() {
            if tokio::time::timeout(limit, task).await.is_err() {
                tracing::info!(
                    "checkpoint still being written at shutdown; the next one comes later"
                );
            }
        }
    }
}

/// The kernel's add-file rows (path, partition values, size, modification time, statistics)
/// for `adds`. Statistics are delta-rs's JSON, turned into the struct the kernel writes back.
fn adds_batch(adds: &[Add]) -> Result<RecordBatch, arrow::error::ArrowError> {
    let paths: ArrayRef = Arc::new(StringArray::from_iter_values(
        adds.iter().map(|a| a.path.as_str()),
    ));
    let mut partitions = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for add in adds {
        let mut values: Vec<_> = add.partition_values.iter().collect();
        values.sort();
        for (key, value) in values {
            partitions.keys().append_value(key);
            partitions.values().append_option(value.as_deref());
        }
        partitions.append(true)?;
    }
    let partitions: ArrayRef = Arc::new(partitions.finish());
    let sizes: ArrayRef = Arc::new(Int64Array::from_iter_values(adds.iter().map(|a| a.size)));
    let times: ArrayRef = Arc::new(Int64Array::from_iter_values(
        adds.iter().map(|a| a.modification_time),
    ));
    let stats = stats_struct(adds)?;
    let fields = vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("partitionValues", partitions.data_type().clone(), false),
        Field::new("size", DataType::Int64, false),
        Field::new("modificationTime", DataType::Int64, false),
        Field::new("stats", stats.data_type().clone(), true),
    ];
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        vec![paths, partitions, sizes, times, Arc::new(stats)],
    )
}

/// Each file's statistics JSON (`numRecords`, `minValues`, `maxValues`, `nullCount`) as one
/// struct column: the kernel serializes it back to the same JSON in the Add action.
fn stats_struct(adds: &[Add]) -> Result<StructArray, arrow::error::ArrowError> {
    let lines: Vec<&str> = adds
        .iter()
        .map(|a| a.stats.as_deref().unwrap_or("{}"))
        .collect();
    let values = lines.iter().map(|line| {
        serde_json::from_str::<serde_json::Value>(line)
            .map_err(|e| arrow::error::ArrowError::JsonError(e.to_string()))
    });
    let mut schema = arrow_json::reader::infer_json_schema_from_iterator(values)?;
    if schema.field_with_name("numRecords").is_err() {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("numRecords", DataType::Int64, true));
        schema = Schema::new(fields);
    }
    let mut decoder = arrow_json::ReaderBuilder::new(Arc::new(schema.clone()))
        .with_batch_size(adds.len().max(1))
        .build_decoder()?;
    decoder.decode(lines.join("\n").as_bytes())?;
    let batch = decoder
        .flush()?
        .unwrap_or_else(|| RecordBatch::new_empty(Arc::new(schema)));
    let fields: Fields = batch.schema().fields().clone();
    Ok(StructArray::new(fields, batch.columns().to_vec(), None))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn statistics_survive_as_a_struct() {
        let add = |path: &str, stats: &str| Add {
            path: path.into(),
            partition_values: HashMap::from([("dt".to_string(), Some("2026-01-01".to_string()))]),
            size: 10,
            modification_time: 1,
            data_change: true,
            stats: Some(stats.into()),
            ..Default::default()
        };
        let batch = adds_batch(&[
            add("a", r#"{"numRecords":2,"minValues":{"t":"2026-01-01T00:00:00.000Z","n":1},"maxValues":{"n":5.5},"nullCount":{"n":0}}"#),
            add("b", r#"{"numRecords":3}"#),
        ])
        .unwrap();
        assert_eq!(batch.num_rows(), 2);
        let stats = batch
            .column(4)
            .as_any()
            .downcast_ref::<StructArray>()
            .unwrap();
        let records = stats
            .column_by_name("numRecords")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(records.values(), &[2, 3]);
        assert!(stats.column_by_name("minValues").is_some());
    }
}
