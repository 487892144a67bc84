//! The Redis online store: the sink that writes it (one hash per entity, newest event time
//! wins, native or Feast layout) and the parts every reader of the store shares: the
//! connection ([`RedisClient`]), the key encoding ([`entity_key`], [`feast::key_from_text`])
//! and the layouts' value formats ([`feast`]). Reads are the `serving` module's.

mod builder;
mod calls;
mod config;
mod connection;
pub mod feast;
mod feast_proto;
mod layout;
mod newest;
mod probe;
mod section;
mod ties;
#[cfg(test)]
mod ties_script_tests;
mod writer;

pub use builder::RedisSinkBuilder;
pub use config::{LayoutKind, RedisMode, RedisServiceConfig, RedisSinkConfig};
pub use connection::{RedisClient, RedisConnection, RedisSetupError};
pub use feast::supported as feast_supports;
pub use layout::{entity_key, Layout, NativeLayout, EVENT_TIME_FIELD};
pub use probe::RedisProbe;
pub use section::overlapping_key_spaces;
pub use writer::RedisSink;
