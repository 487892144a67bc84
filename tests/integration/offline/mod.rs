//! The offline store (the Delta table): exactly-once across crashes and replicas, backfill,
//! rollover, types, schema evolution, maintenance, a store that is down, outside readers and
//! Feast's historical features; and the end-to-end run into Redis, local disk and S3.

mod broker_gaps;
mod delta;
mod end_to_end;
mod feast;
mod maintenance;
mod store;
mod store_outage;

pub use delta::{delta_python, read_with, read_with_keys};
pub use feast::historical_features;
