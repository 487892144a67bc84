//! The Redis online sink: one hash per entity, newest event time wins.

mod builder;
mod cache;
mod cached_reads;
mod calls;
mod config;
mod connection;
mod feast;
mod feast_proto;
mod layout;
mod probe;
mod reader;
mod rendered;
mod section;
mod values;
mod view;
mod writer;

pub use builder::RedisSinkBuilder;
pub use cache::CachedRow;
pub use config::{LayoutKind, OnlineSinkConfig, RedisServiceConfig};
pub use connection::{RedisClient, RedisConnection, RedisMode, RedisSetupError};
pub use feast::supported as feast_supports;
pub use layout::{entity_key, Layout, NativeLayout, EVENT_TIME_FIELD};
pub use probe::RedisProbe;
pub use reader::{Found, Lookup, OnlineReader, QueryError, ReadCacheConfig};
pub use rendered::{feast_timestamp, FeastJson, FEAST_EPOCH};
pub use section::overlapping_key_spaces;
pub use values::ValueStyle;
pub use view::OnlineView;
pub use writer::RedisSink;
