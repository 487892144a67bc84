//! The offline sink: each pipeline's rows in a Delta Lake table of Parquet files on any
//! `object_store` backend (local disk, S3 and S3-compatible servers, GCS, Azure).
//!
//! ## Commit protocol
//!
//! - One rollover is one table version: the Add actions of its files (one per `dt`/`hr`
//!   partition it touches) and, per topic partition it holds messages of, that partition's last
//!   message id as application transactions ([`table::positions`]). Files are written first, then the
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

//! ## Where things are
//!
//! - [`table`]: what any writer of the table needs: the snapshot kept current, commits with
//!   topic positions, the data files, the columns and schema, the object store.
//! - [`writer`]: the one rollover writer: when a rollover is due, its files written once and
//!   committed as one version (the offline sink and the feature log use it).
//! - [`streaming`]: the sink of a pipeline's `offline:` section: buffers a rollover, commits
//!   it through the writer with its topic positions, reports its messages durable.
//! - [`read`]: reading data files column- and row-wise (the audit, training sets).
//! - [`ops`]: the operator commands `offline compact`, `vacuum` and `upgrade`.

mod config;
pub mod ops;
mod probe;
pub mod read;
mod sink;
pub mod streaming;
pub mod table;
pub mod writer;

pub use config::{
    check_store_url, defaults, Compression, DeltaSinkConfig, Granularity, ObjectStoreServiceConfig,
    PartitionTime,
};
pub use probe::ObjectStoreProbe;
pub use sink::DeltaSinkBuilder;
pub use streaming::DeltaSink;
pub use table::{
    canonical, column_type, desired_schema, instance_id, message_key, metadata_keys,
    parquet_properties, writer_properties, ActiveFile, CommitError, Committed, CommittedPositions,
    FileCount, LayoutError, MessageKey, Opened, SpecError, StoreError, Table, TableError,
    TableLayout, TableLocation, TableRoot, TableSpec, DATE_COLUMN, HOUR_COLUMN,
    PUBLISH_TIME_COLUMN,
};
pub use writer::{Landed, RolloverError, RolloverLimits, RolloverRows, RolloverWriter};
