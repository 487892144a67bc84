//! Redis, the online store: everything that speaks to it.
//!
//! - [`RedisClient`], [`RedisConnection`]: the connection (standalone, cluster, TLS), with
//!   client tracking for the serving read cache ([`RedisClient::connect_tracking`]).
//! - Layouts ([`Layout`]: native, or Feast's bytes through [`feast`]), the key encoding
//!   ([`entity_key`], [`feast::key_from_text`]) and latest-wins within a batch.
//! - The latest-wins script calls and [`RedisSink`], the writer behind a pipeline's
//!   `online:` section; `sink.rs` plugs it into the runtime ([`RedisSinkBuilder`]).
//!
//! - Aggregation tiles ([`tiles`]): the sink behind a pipeline's `aggregations:`.
//!
//! Reads are the `serving` module's; it uses the connection, keys and layouts from here.

mod calls;
mod config;
mod connection;
mod entity_write;
pub mod feast;
mod feast_proto;
mod layout;
mod newest;
mod probe;
mod sink;
#[cfg(test)]
mod tests;
mod ties;
pub mod tiles;
mod writer;

pub use config::{LayoutKind, RedisMode, RedisServiceConfig, RedisSinkConfig};
pub use connection::{RedisClient, RedisConnection, RedisSetupError};
pub use feast::supported as feast_supports;
pub use layout::{entity_key, Layout, NativeLayout, EVENT_TIME_FIELD};
pub use probe::RedisProbe;
pub use sink::overlapping_key_spaces;
pub use sink::RedisSinkBuilder;
pub use writer::RedisSink;
