//! Everything needed to open (or create) one pipeline's table: where it is, the schema its
//! rows call for, how it is partitioned.

use arrow::datatypes::{Schema, SchemaRef};

use super::layout::{self, LayoutError, TableLayout, PUBLISH_TIME_COLUMN};
use super::schema::desired_schema;
use super::store::{StoreError, TableLocation, TableRoot};
use super::{Opened, Table, TableError};
use crate::delta::{DeltaSinkConfig, Granularity, PartitionTime};

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
        store: &TableRoot,
        pipeline: &str,
        rows: &Schema,
        event_time: &str,
        config: &DeltaSinkConfig,
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

    /// Opens the table, creating or evolving it (see [`Table::open`]).
    pub async fn open(&self) -> Result<(Table, Opened), TableError> {
        self.open_table(false).await
    }

    pub(crate) async fn open_table(&self, upgrading: bool) -> Result<(Table, Opened), TableError> {
        Table::open(
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
