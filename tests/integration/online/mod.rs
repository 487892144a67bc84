//! The online store (Redis): latest-wins, TTL, typed reads, AUTH, Cluster and TLS, Redis
//! going away, and Feast's SDK reading what the connector wrote.

mod feast;
mod redis_outage;
mod store;

pub use feast::{feast_python, read_with_feast};
