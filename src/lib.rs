//! feature-connector: consumes Pulsar feature topics, checks each message against the
//! pipeline's schema, writes the newest value per entity to Redis and every row to a Delta Lake table.
//!
//! Data flow, one folder per role: [`source`] → [`schema`] (decode) → [`record`] →
//! [`sink`] (redis, delta), wired by [`pipeline`]; [`serving`] answers feature reads from
//! Redis; [`config`] loads the YAML.

pub mod aggregate;
pub mod audit;
pub mod cli;
pub mod config;
pub mod delta;
pub mod health;
pub mod http;
pub mod metrics;
pub mod pipeline;
pub mod pulsar;
pub mod record;
pub mod redis;
pub mod retry;
pub mod schema;
pub mod secret;
pub mod serving;
pub mod sink;
pub mod source;
pub mod tls;
pub mod training;
pub mod yaml;
