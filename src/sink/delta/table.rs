//! One pipeline's Delta table: opened (created or evolved) at start, kept at the newest version
//! by replaying only commits it has not seen, committed to under optimistic concurrency.
//!
//! Nothing here lists or reads data files: the state is the log's newest checkpoint plus the
//! commits after it, and each refresh reads only the commits that are new since the last one.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use deltalake::kernel::engine::arrow_conversion::TryIntoArrow;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties, TransactionError};
use deltalake::kernel::{Action, Add, StructField, Transaction};
use deltalake::logstore::{get_actions, LogStoreRef};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, DeltaTableError, TableProperty};
use futures::TryStreamExt;
use object_store::ObjectStore;
use tokio::task::JoinHandle;

use super::layout::{self, LayoutError};
use super::positions::{app_ids, key_from_versions, CommittedPositions, MessageKey};
use super::store::TableLocation;

/// Why the table could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The store or the log could not be read or written; retrying may help.
    #[error("{what}: {source}")]
    Delta {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: DeltaTableError,
    },
    /// The table cannot take this pipeline; retrying will not help.
    #[error("{0}")]
    Refused(String),
}

impl TableError {
    fn delta(what: &'static str) -> impl FnOnce(DeltaTableError) -> Self {
        move |source| Self::Delta { what, source }
    }
}

/// How a commit ended when it did not land.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// Another writer committed something this commit depends on (the same topic partition,
    /// or the table's schema); refresh, re-check and try again.
    #[error("another writer committed first: {0}")]
    Conflict(String),
    /// The store failed; the commit may or may not have landed (a retry finds out).
    #[error("commit failed: {0}")]
    Failed(DeltaTableError),
}

/// What a successful commit reports.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    /// The table version it created.
    pub version: u64,
    /// Other writers' commits delta-rs checked and let through before it.
    pub retries: u64,
}

/// A pipeline's table and what it holds per topic partition.
pub struct OfflineTable {
    location: TableLocation,
    table: DeltaTable,
    positions: CommittedPositions,
    checkpoint_interval: u64,
    checkpoints: Option<JoinHandle<()>>,
}

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

impl OfflineTable {
    /// Opens the table at `location`, creating it when missing and adding columns for fields the
    /// pipeline schema gained. Refuses (with the field named) a schema the table cannot take,
    /// and (unless `upgrading`) a folder that holds Parquet files of the earlier, table-less
    /// format.
    pub async fn open(
        location: TableLocation,
        pipeline: &str,
        desired: &Schema,
        partition_columns: &[String],
        checkpoint_interval: u64,
        upgrading: bool,
    ) -> Result<(Self, Opened), TableError> {
        let mut table = DeltaTable::new(location.log_store.clone());
        let opened = match table.load().await {
            Ok(()) => evolve(&mut table, desired, partition_columns).await?,
            Err(DeltaTableError::NotATable(_)) => {
                if !upgrading {
                    refuse_legacy_files(&location, pipeline).await?;
                }
                create(
                    &mut table,
                    pipeline,
                    desired,
                    partition_columns,
                    checkpoint_interval,
                )
                .await?
            }
            Err(source) => {
                return Err(TableError::Delta {
                    what: "reading the table's log",
                    source,
                })
            }
        };
        Ok((
            Self {
                location,
                table,
                positions: CommittedPositions::default(),
                checkpoint_interval,
                checkpoints: None,
            },
            opened,
        ))
    }

    /// Opens a table that must exist, as it is (maintenance commands).
    pub async fn open_existing(location: TableLocation) -> Result<Self, TableError> {
        let mut table = DeltaTable::new(location.log_store.clone());
        table.load().await.map_err(|source| match source {
            DeltaTableError::NotATable(_) => {
                TableError::Refused(format!("{} is not a Delta table (yet)", location.url))
            }
            source => TableError::Delta {
                what: "reading the table's log",
                source,
            },
        })?;
        let checkpoint_interval = table
            .snapshot()
            .ok()
            .and_then(|s| s.table_config().checkpoint_interval)
            .map_or(100, |n| n.get());
        Ok(Self {
            location,
            table,
            positions: CommittedPositions::default(),
            checkpoint_interval,
            checkpoints: None,
        })
    }

    /// Takes over a table state an operation returned.
    pub(crate) fn replace(&mut self, table: DeltaTable) {
        self.table = table;
    }

    /// Commits `actions` as one version of `operation` (maintenance), letting delta-rs check
    /// and pass other writers' commits; returns the version.
    pub(crate) async fn commit_actions(
        &mut self,
        actions: Vec<Action>,
        operation: DeltaOperation,
    ) -> Result<u64, TableError> {
        let state = self
            .table
            .snapshot()
            .map_err(TableError::delta("reading the table"))?;
        let finalized = CommitBuilder::from(
            CommitProperties::default()
                .with_create_checkpoint(false)
                .with_cleanup_expired_logs(Some(false))
                .with_max_retries(20),
        )
        .with_actions(actions)
        .build(Some(state), self.log_store(), operation)
        .await
        .map_err(TableError::delta("committing"))?;
        self.table.state = Some(finalized.snapshot());
        Ok(finalized.version())
    }

    /// The table's URL.
    pub fn url(&self) -> &url::Url {
        &self.location.url
    }

    /// The store rooted at the table's folder.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.location.store
    }

    /// The loaded table (for writers of data files).
    pub fn delta(&self) -> &DeltaTable {
        &self.table
    }

    /// The table's Arrow schema (partition columns included).
    pub fn arrow_schema(&self) -> Result<SchemaRef, TableError> {
        let state = self
            .table
            .snapshot()
            .map_err(TableError::delta("reading the table"))?;
        let schema: Schema = state
            .schema()
            .as_ref()
            .try_into_arrow()
            .map_err(|e: arrow::error::ArrowError| TableError::Refused(e.to_string()))?;
        Ok(Arc::new(schema))
    }

    /// The version the state is at.
    pub fn version(&self) -> u64 {
        self.table.version().unwrap_or(0)
    }

    fn log_store(&self) -> LogStoreRef {
        self.location.log_store.clone()
    }

    /// Moves the state to the newest version, applying the position changes of every commit in
    /// between; returns how many commits were new.
    pub async fn refresh(&mut self) -> Result<u64, TableError> {
        let before = self.version();
        let latest = self
            .table
            .get_latest_version()
            .await
            .map_err(TableError::delta("listing the table's log"))?;

        if latest <= before {
            return Ok(0);
        }
        self.replay(before + 1, latest).await?;
        self.table
            .update_incremental(Some(latest))
            .await
            .map_err(TableError::delta("reading the table's new commits"))?;
        Ok(latest - before)
    }

    /// Applies the `txn` actions of commits `from..=to` to the known positions.
    async fn replay(&mut self, from: u64, to: u64) -> Result<(), TableError> {
        let log_store = self.log_store();
        for version in from..=to {
            let Some(bytes) = log_store
                .read_commit_entry(version)
                .await
                .map_err(TableError::delta("reading a commit"))?
            else {
                continue;
            };
            let actions =
                get_actions(version, &bytes).map_err(TableError::delta("parsing a commit"))?;
            let moved = self.positions.apply(&actions);
            if !moved.is_empty() {
                tracing::debug!(version, partitions = ?moved, "another writer committed these topic partitions");
            }
        }
        Ok(())
    }

    /// The last message of `partition` the table holds, looked up in the table's state the
    /// first time it is asked for.
    pub async fn position(&mut self, partition: &str) -> Result<Option<MessageKey>, TableError> {
        if !self.positions.knows(partition) {
            let state = self
                .table
                .snapshot()
                .map_err(TableError::delta("reading the table"))?;
            let mut versions = [None; 3];
            for (slot, app_id) in app_ids(partition).into_iter().enumerate() {
                versions[slot] = state
                    .transaction_version(self.location.log_store.as_ref(), app_id)
                    .await
                    .map_err(TableError::delta("reading the table's transactions"))?;
            }
            let [ledger, entry, batch] = versions;
            self.positions
                .set(partition, key_from_versions(ledger, entry, batch));
        }
        Ok(self.positions.get(partition))
    }

    /// The positions known so far (looked up or applied from commits).
    pub fn positions(&self) -> &CommittedPositions {
        &self.positions
    }

    /// Commits `adds` and `transactions` as one version, on top of the state this table is at.
    /// A conflict on one of the transactions' application ids (another writer committed the
    /// same partition since) fails with [`CommitError::Conflict`]; other writers' unrelated
    /// commits in between are checked and let through by delta-rs.
    pub async fn commit(
        &mut self,
        adds: Vec<Add>,
        transactions: Vec<Transaction>,
        app_metadata: HashMap<String, serde_json::Value>,
    ) -> Result<Committed, CommitError> {
        let read_version = self.version();
        let state = self.table.snapshot().map_err(CommitError::Failed)?;
        let partition_by = Some(state.metadata().partition_columns().to_vec());
        let properties = CommitProperties::default()
            .with_application_transactions(transactions.clone())
            .with_metadata(app_metadata)
            .with_create_checkpoint(false)
            .with_cleanup_expired_logs(Some(false))
            .with_max_retries(20);
        let outcome = CommitBuilder::from(properties)
            .with_actions(adds.into_iter().map(Action::Add).collect())
            .build(
                Some(state),
                self.log_store(),
                DeltaOperation::Write {
                    mode: SaveMode::Append,
                    partition_by,
                    predicate: None,
                },
            )
            .await;
        let finalized = match outcome {
            Ok(finalized) => finalized,
            Err(DeltaTableError::Transaction {
                source: TransactionError::CommitConflict(conflict),
            }) => return Err(CommitError::Conflict(conflict.to_string())),
            Err(DeltaTableError::Transaction {
                source: TransactionError::MaxCommitAttempts(n),
            }) => {
                return Err(CommitError::Conflict(format!(
                    "{n} other commits landed while committing"
                )))
            }
            Err(other) => return Err(CommitError::Failed(other)),
        };
        let version = finalized.version();
        // Commits other writers made between the read version and ours passed the conflict
        // check, but may move partitions this writer knows (not the ones it just committed).
        if version > read_version + 1 {
            if let Err(e) = self.replay(read_version + 1, version - 1).await {
                tracing::warn!(error = %e, "cannot read the commits before ours; reloading positions");
                self.positions = CommittedPositions::default();
            }
        }
        self.positions.apply(
            &transactions
                .into_iter()
                .map(Action::Txn)
                .collect::<Vec<_>>(),
        );
        self.table.state = Some(finalized.snapshot());
        self.checkpoint_if_due(version);
        Ok(Committed {
            version,
            retries: finalized.metrics.num_retries,
        })
    }

    /// Starts writing a checkpoint (and dropping log files older than the table's log
    /// retention) in the background when `version` completes an interval; a commit never waits
    /// for it. Only one runs at a time.
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
        let table = self.table.clone();
        self.checkpoints = Some(tokio::spawn(async move {
            let started = std::time::Instant::now();
            match deltalake::checkpoints::create_checkpoint(&table, None).await {
                Ok(()) => {
                    tracing::info!(
                        version,
                        seconds = started.elapsed().as_secs_f64(),
                        "table checkpoint written"
                    );
                    if let Err(e) = deltalake::checkpoints::cleanup_metadata(&table, None).await {
                        tracing::warn!(error = %e, "cannot remove expired log files");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, version, "cannot write a table checkpoint; start-up reads more commits until the next one")
                }
            }
        }));
    }
}

async fn create(
    table: &mut DeltaTable,
    pipeline: &str,
    desired: &Schema,
    partition_columns: &[String],
    checkpoint_interval: u64,
) -> Result<Opened, TableError> {
    let columns = layout::kernel_schema(desired)
        .map_err(|e| TableError::Refused(e.to_string()))?
        .fields()
        .cloned()
        .collect::<Vec<StructField>>();
    let created = table
        .create()
        .with_table_name(pipeline)
        .with_comment("written by feature-connector")
        .with_columns(columns)
        .with_partition_columns(partition_columns.to_vec())
        .with_configuration_property(
            TableProperty::CheckpointInterval,
            Some(checkpoint_interval.to_string()),
        )
        .with_save_mode(SaveMode::ErrorIfExists)
        .await;
    match created {
        Ok(new) => {
            *table = new;
            Ok(Opened::Created)
        }
        // Another replica created it first: use theirs (and check it as an existing table).
        Err(_) if table.load().await.is_ok() => evolve(table, desired, partition_columns).await,
        Err(source) => Err(TableError::Delta {
            what: "creating the table",
            source,
        }),
    }
}

async fn evolve(
    table: &mut DeltaTable,
    desired: &Schema,
    partition_columns: &[String],
) -> Result<Opened, TableError> {
    let state = table
        .snapshot()
        .map_err(TableError::delta("reading the table"))?;
    let have = state.metadata().partition_columns().to_vec();
    if have != partition_columns {
        return Err(TableError::Refused(format!(
            "the table is partitioned by {have:?} but the pipeline asks for {partition_columns:?} (offline.partition_granularity); keep the granularity or write to a new offline url"
        )));
    }
    let existing: Schema = state
        .schema()
        .as_ref()
        .try_into_arrow()
        .map_err(|e: arrow::error::ArrowError| TableError::Refused(e.to_string()))?;
    let evolved = layout::evolve(&existing, desired).map_err(|e| match e {
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
    let fields = layout::kernel_schema(&Schema::new(changed))
        .map_err(|e| TableError::Refused(e.to_string()))?
        .fields()
        .cloned()
        .collect::<Vec<StructField>>();
    let updated = table
        .clone()
        .add_columns()
        .with_fields(fields)
        .await
        .map_err(TableError::delta("adding columns for new fields"))?;
    *table = updated;
    Ok(Opened::Evolved(names))
}

/// A table-less folder holding Parquet files was written by the earlier format (one file per
/// rollover, positions in the footers): mixing it into a table would duplicate or hide rows.
/// Listing happens only here, once, when the table does not exist yet.
async fn refuse_legacy_files(location: &TableLocation, pipeline: &str) -> Result<(), TableError> {
    let mut listing = location.store.list(None);
    let mut found = 0usize;
    while let Some(meta) = listing.try_next().await.map_err(|e| TableError::Delta {
        what: "checking the table's folder",
        source: DeltaTableError::ObjectStore { source: e },
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

impl OfflineTable {
    /// The table's active data files (path, bytes), from its state (not from a listing).
    pub async fn files(&mut self) -> Result<Vec<(String, u64)>, TableError> {
        let state = self
            .table
            .snapshot()
            .map_err(TableError::delta("reading the table"))?;
        Ok(state
            .log_data()
            .into_iter()
            .map(|file| {
                (
                    file.path().to_string(),
                    u64::try_from(file.size()).unwrap_or(0),
                )
            })
            .collect())
    }
}
