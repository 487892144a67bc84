//! One pipeline's Delta table: opened (created or evolved) at start, kept at the newest version
//! by replaying only commits it has not seen.
//!
//! The live state is a Delta kernel snapshot: the table's protocol, metadata and log segment
//! (newest checkpoint plus the commits after it), never the list of its data files, so neither
//! opening nor committing costs more as the table grows. Nothing here lists or reads data files
//! (except once, to refuse a folder of the earlier format, when the table does not exist yet).
//!
//! Everything a writer of the table needs lives here: [`commit`] (a version with its files
//! and topic positions), [`positions`], the data [`files`], the columns ([`layout`]) and
//! schema, the object store ([`store`]); the streaming sink and the operator commands build
//! on it.

pub mod commit;
mod counting_store;
mod error;
pub mod files;
pub mod layout;
mod log_cleanup;
mod open;
pub mod positions;
mod schema;
mod spec;
pub mod store;

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use delta_kernel::{Engine, Snapshot, SnapshotRef};
use deltalake::kernel::engine::arrow_conversion::TryIntoArrow;
use deltalake::logstore::{get_actions, LogStoreRef};
use deltalake::{BlindDeltaTable, DeltaTable};
use object_store::ObjectStore;
use tokio::task::JoinHandle;

pub use commit::{CommitError, Committed};
pub(crate) use error::blocking;
pub use error::TableError;
pub use files::{metadata_keys, parquet_properties, writer_properties, ActiveFile, FileCount};
pub use layout::{LayoutError, TableLayout, DATE_COLUMN, HOUR_COLUMN, PUBLISH_TIME_COLUMN};
pub use open::Opened;
pub use positions::{message_key, CommittedPositions, MessageKey};
pub use schema::{canonical, column_type, desired_schema};
pub use spec::{instance_id, SpecError, TableSpec};
pub use store::{StoreError, TableLocation, TableRoot};

use futures::TryStreamExt;
use open::{create, evolve, has_log, load_snapshot, refuse_legacy_files};
use positions::{app_ids, key_from_versions};

/// A pipeline's table and what it holds per topic partition.
pub struct Table {
    pub(crate) location: TableLocation,
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) snapshot: SnapshotRef,
    /// Writes data files (delta-rs's writer wants a table; this one loads no file list);
    /// made at the first commit, so that start-up does not load the log twice.
    pub(crate) files: Option<BlindDeltaTable>,
    pub(crate) positions: CommittedPositions,
    pub(crate) checkpoint_interval: u64,
    pub(crate) checkpoints: Option<JoinHandle<()>>,
    /// Set when a checkpoint was written: the next commit first reloads the snapshot onto it.
    pub(crate) reload: Arc<std::sync::atomic::AtomicBool>,
    /// When expired log files were last looked for.
    pub(crate) cleanup: log_cleanup::CleanupSchedule,
}

impl Table {
    /// Opens the table at `location`, creating it when missing and adding columns for fields the
    /// pipeline schema gained. Refuses (with the field named) a schema the table cannot take,
    /// and (unless `upgrading`) a folder that holds Parquet files of the earlier, table-less
    /// format. An existing table costs one snapshot load: the newest checkpoint's hint, one
    /// listing of the log from there, the checkpoint's metadata and the commits after it.
    pub async fn open(
        location: TableLocation,
        pipeline: &str,
        desired: &Schema,
        partition_columns: &[String],
        checkpoint_interval: u64,
        stats_columns: &[String],
        upgrading: bool,
    ) -> Result<(Self, Opened), TableError> {
        let (snapshot, opened) = match load_snapshot(&location).await {
            Ok(snapshot) => match evolve(&location, &snapshot, desired, partition_columns).await? {
                Opened::Existing => (snapshot, Opened::Existing),
                changed => (load_snapshot(&location).await?, changed),
            },
            Err(error) => {
                if has_log(&location).await? {
                    return Err(error);
                }
                if !upgrading {
                    refuse_legacy_files(&location, pipeline).await?;
                }
                let opened = create(
                    &location,
                    pipeline,
                    desired,
                    partition_columns,
                    checkpoint_interval,
                    stats_columns,
                )
                .await?;
                (load_snapshot(&location).await?, opened)
            }
        };
        Ok((Self::from_snapshot(location, snapshot), opened))
    }

    /// Opens a table that must exist, as it is.
    pub async fn open_existing(location: TableLocation) -> Result<Self, TableError> {
        match load_snapshot(&location).await {
            Ok(snapshot) => Ok(Self::from_snapshot(location, snapshot)),
            Err(_) if !has_log(&location).await? => Err(TableError::Refused(format!(
                "{} is not a Delta table (yet)",
                location.url
            ))),
            Err(error) => Err(error),
        }
    }

    fn from_snapshot(location: TableLocation, snapshot: SnapshotRef) -> Self {
        let checkpoint_interval = snapshot
            .table_properties()
            .checkpoint_interval
            .map_or(100, |n| n.get());
        Self {
            engine: location.log_store.engine(None),
            location,
            snapshot,
            files: None,
            positions: CommittedPositions::default(),
            checkpoint_interval,
            checkpoints: None,
            reload: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            cleanup: log_cleanup::CleanupSchedule::default(),
        }
    }

    /// The table's URL.
    pub fn url(&self) -> &url::Url {
        &self.location.url
    }

    /// The store rooted at the table's folder.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.location.store
    }

    /// The table's log store.
    pub fn log_store(&self) -> LogStoreRef {
        self.location.log_store.clone()
    }

    /// The table for writers of data files.
    pub async fn files_table(&mut self) -> Result<&BlindDeltaTable, TableError> {
        if self.files.is_none() {
            let table = BlindDeltaTable::try_new_with_log_store(self.log_store())
                .await
                .map_err(TableError::delta("reading the table's metadata"))?;
            self.files = Some(table);
        }
        self.files
            .as_ref()
            .ok_or_else(|| TableError::Refused("no table for writing files".into()))
    }

    /// The table's Arrow schema (partition columns included).
    pub fn arrow_schema(&self) -> Result<SchemaRef, TableError> {
        let schema: Schema = self
            .snapshot
            .schema()
            .as_ref()
            .try_into_arrow()
            .map_err(|e: arrow::error::ArrowError| TableError::Refused(e.to_string()))?;
        Ok(Arc::new(schema))
    }

    /// The version the state is at.
    pub fn version(&self) -> u64 {
        self.snapshot.version()
    }

    /// Moves the state to the newest version, applying the position changes of every commit in
    /// between; returns how many commits were new.
    pub async fn refresh(&mut self) -> Result<u64, TableError> {
        let before = self.version();
        let (engine, current) = (self.engine.clone(), self.snapshot.clone());
        let newest = blocking("reading the table's new commits", move || {
            Snapshot::builder_from(current).build(engine.as_ref())
        })
        .await?;
        let after = newest.version();
        if after > before {
            self.replay(before + 1, after).await?;
        }
        self.snapshot = newest;
        Ok(after.saturating_sub(before))
    }

    /// Loads the newest snapshot afresh (from the newest checkpoint), applying the position
    /// changes of commits since the current one.
    pub(crate) async fn reload_snapshot(&mut self) -> Result<(), TableError> {
        let before = self.version();
        let fresh = load_snapshot(&self.location).await?;
        let after = fresh.version();
        if after > before {
            self.replay(before + 1, after).await?;
        }
        if after >= before {
            self.snapshot = fresh;
        }
        Ok(())
    }

    /// Applies the `txn` actions of commits `from..=to` to the known positions.
    pub(crate) async fn replay(&mut self, from: u64, to: u64) -> Result<(), TableError> {
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
            let (engine, snapshot) = (self.engine.clone(), self.snapshot.clone());
            let ids = app_ids(partition);
            let [ledger, entry, batch] = blocking("reading the table's transactions", move || {
                let mut versions = [None; 3];
                for (slot, app_id) in ids.iter().enumerate() {
                    versions[slot] = snapshot.get_app_id_version(app_id, engine.as_ref())?;
                }
                Ok(versions)
            })
            .await?;
            self.positions
                .set(partition, key_from_versions(ledger, entry, batch));
        }
        Ok(self.positions.get(partition))
    }

    /// The positions known so far (looked up or applied from commits).
    pub fn positions(&self) -> &CommittedPositions {
        &self.positions
    }

    /// The whole table with its file list (maintenance; costs a read of every file entry).
    pub async fn load_full(&self) -> Result<DeltaTable, TableError> {
        let mut table = DeltaTable::new(self.log_store());
        table
            .load()
            .await
            .map_err(TableError::delta("reading the table's files"))?;
        Ok(table)
    }

    /// The active data files, from the table's state (every file entry is read).
    pub async fn active_files(&self) -> Result<Vec<ActiveFile>, TableError> {
        let table = self.load_full().await?;
        let state = table
            .snapshot()
            .map_err(|e| TableError::Refused(e.to_string()))?;
        Ok(state
            .log_data()
            .into_iter()
            .map(|file| ActiveFile {
                path: file.path().to_string(),
                size: u64::try_from(file.size()).unwrap_or(0),
                partition: file.partition_values_map().into_iter().collect(),
                rows: file.num_records(),
                remove: file.remove_action(false),
            })
            .collect())
    }

    /// Every data file in the table's folder (a listing: referenced or not).
    pub async fn stored_files(&self) -> Result<FileCount, TableError> {
        let mut count = FileCount::default();
        let mut listing = self.store().list(None);
        while let Some(meta) = listing.try_next().await.map_err(|e| TableError::Delta {
            what: "listing the table's folder",
            source: e.into(),
        })? {
            let path = meta.location.as_ref();
            if path.ends_with(".parquet") && !path.starts_with("_delta_log") {
                count.add(meta.size);
            }
        }
        Ok(count)
    }
}
