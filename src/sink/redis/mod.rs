//! The Redis online sink: one hash per entity, newest event time wins.

mod config;
mod layout;
mod reader;
mod writer;

pub use config::{OnlineSinkConfig, RedisServiceConfig};
pub use layout::{entity_key, NativeLayout, EVENT_TIME_FIELD};
pub use reader::{OnlineReader, QueryError};
pub use writer::RedisSink;
