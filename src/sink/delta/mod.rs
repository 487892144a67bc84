//! The offline sink: each pipeline's rows in a Delta Lake table of Parquet files on any
//! `object_store` backend (local disk, S3 and S3-compatible servers, GCS, Azure).
//!
//! ## Commit protocol
//!
//! - One rollover is one table version: the Add actions of its files (one per `dt`/`hr`
//!   partition it touches) and, per topic partition it holds messages of, that partition's last
//!   message id as application transactions ([`positions`]). Files are written first, then the
//!   commit; files of a commit that never lands are never read (`offline vacuum` removes them).
//! - Before a commit the sink brings its view of the table to the newest version (reading only
//!   the commits it has not seen), drops buffered rows whose message the table already holds,
//!   and commits on top of that version. If another writer committed one of the same topic
//!   partitions in between, Delta's conflict check refuses the commit; the sink refreshes,
//!   drops what the other writer committed and commits the rest. Commits of other partitions
//!   (other replicas) pass through delta-rs's retry.
//! - Messages are acknowledged only after their version exists. A redelivered message that
//!   the table holds is skipped, so every message is in the table once, whichever replica or
//!   backfill wrote it.
//! - Start-up reads the log's newest checkpoint and the commits after it; a checkpoint is
//!   written every `offline.checkpoint_interval` commits, in the background.

mod builder;
mod commit;
mod committing;
mod config;
mod files;
mod layout;
mod log_cleanup;
mod maintenance;
mod open;
mod positions;
mod probe;
mod requests;
mod rollover;
mod section;
mod store;
mod table;
mod types;
mod upgrade;
mod writer;

use arrow::datatypes::{Schema, SchemaRef};

pub use builder::DeltaSinkBuilder;
pub use commit::{CommitError, Committed};
pub use config::{
    check_store_url, Compression, Granularity, ObjectStoreServiceConfig, OfflineSinkConfig,
    PartitionTime,
};
pub use files::{metadata_keys, writer_properties};
pub use layout::{LayoutError, TableLayout, DATE_COLUMN, HOUR_COLUMN, PUBLISH_TIME_COLUMN};
pub use maintenance::{partition_end_ms, plan_compaction, ActiveFile, CompactionGroup, FileCount};
pub use positions::{message_key, CommittedPositions, MessageKey};
pub use probe::ObjectStoreProbe;
pub use store::{OfflineStore, StoreError, TableLocation};
pub use table::{OfflineTable, Opened, TableError};
pub use types::desired_schema;
pub use upgrade::UpgradeReport;
pub use writer::DeltaSink;

/// Everything needed to open (or create) one pipeline's table.
#[derive(Debug, Clone)]
pub struct TableSpec {
    /// Pipeline (and table) name.
    pub pipeline: String,
    /// This process's instance id (commit metadata).
    pub instance: String,
    /// Where the table is.
    pub location: TableLocation,
    /// The table schema the pipeline's rows call for.
    pub desired: SchemaRef,
    /// Event-time column name.
    pub event_time: String,
    /// Partitioning settings.
    pub partition_by: PartitionTime,
    /// `dt` or `dt` + `hr`.
    pub granularity: Granularity,
    /// Commits between checkpoints.
    pub checkpoint_interval: u64,
}

/// A pipeline's offline settings do not make a table.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The store URL could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The pipeline schema has no table layout.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

impl TableSpec {
    /// The table of `pipeline` in `store`, for rows of `rows`.
    pub fn new(
        store: &OfflineStore,
        pipeline: &str,
        rows: &Schema,
        event_time: &str,
        config: &OfflineSinkConfig,
    ) -> Result<Self, SpecError> {
        Ok(Self {
            pipeline: pipeline.to_string(),
            instance: instance_id(),
            location: store.table(pipeline)?,
            desired: desired_schema(rows, event_time, config.partition_granularity)?,
            event_time: event_time.to_string(),
            partition_by: config.partition_by,
            granularity: config.partition_granularity,
            checkpoint_interval: config.checkpoint_interval,
        })
    }

    /// Opens the table, creating or evolving it (see [`OfflineTable::open`]).
    pub async fn open(&self) -> Result<(OfflineTable, Opened), TableError> {
        self.open_table(false).await
    }

    async fn open_table(&self, upgrading: bool) -> Result<(OfflineTable, Opened), TableError> {
        OfflineTable::open(
            self.location.clone(),
            &self.pipeline,
            &self.desired,
            &layout::partition_columns(self.granularity),
            self.checkpoint_interval,
            &self.stats_columns(),
            upgrading,
        )
        .await
    }

    /// The columns whose statistics the table keeps: the entity keys and the event time (the
    /// first columns, in that order) and the publish time.
    fn stats_columns(&self) -> Vec<String> {
        let mut columns: Vec<String> = Vec::new();
        for field in self.desired.fields() {
            columns.push(field.name().clone());
            if field.name() == &self.event_time {
                break;
            }
        }
        columns.push(PUBLISH_TIME_COLUMN.to_string());
        columns
    }

    /// How rows map onto a table whose schema is `table`.
    pub fn layout(&self, table: SchemaRef) -> TableLayout {
        TableLayout::new(table, &self.event_time, self.partition_by, self.granularity)
    }
}

/// `FC_INSTANCE_ID`, else `HOSTNAME`, else `local`.
pub fn instance_id() -> String {
    std::env::var("FC_INSTANCE_ID")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "local".into())
}
