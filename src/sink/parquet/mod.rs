//! The Parquet offline sink: rows buffered per pipeline, written as one file per rollover to
//! any `object_store` backend, acknowledged only once the file is committed.

mod config;
mod partition;
mod recovery;
mod store;
mod writer;

pub use config::{Compression, ObjectStoreServiceConfig, OfflineSinkConfig};
pub use partition::{Granularity, PartitionTime};
pub use recovery::{message_key, MessageKey, Recovered};
pub use store::{open_store, StoreError};
pub use writer::ParquetSink;
