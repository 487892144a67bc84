//! Feature reads: everything that answers what the online store holds.
//!
//! - [`FeatureReader`] reads feature views from Redis (one pipelined round trip per
//!   request), optionally through the [`ReadCache`] that Redis keeps right by client
//!   tracking; `feature-connector get` uses it directly.
//! - The serving listener (`serving.bind`, [`serve_reads`]) answers Feast's
//!   `POST /get-online-features` ([`feast`]) and `/v1/features/{view}` ([`v1`]) behind the
//!   `guard` (bearer token, request slots) and the body limits (`body`).
//! - [`ServingConfig`] is the service file's `serving:` section with its checks.
//! - [`FeatureLog`] logs the rows `/get-online-features` answered to a Delta table per view
//!   (`serving.feature_logging`), for the entities [`crate::record::entity_hash`] picks.
//!
//! Serving reads the store the Redis sink writes: connection, key encoding and layouts come
//! from [`crate::redis`]; no sink knows an HTTP answer format. The listener itself and
//! the JSON error body are [`crate::http`]'s.

mod aggregated;
mod body;
mod config;
mod coverage;
mod error;
pub mod feast;
pub mod feature_log;
mod guard;
mod lookup;
mod query_error;
mod read_cache;
mod reader;
mod server;
mod state;
pub mod v1;
mod values;
mod view;

pub use config::{
    feature_logging_issues, feature_service_issues, is_loopback_bind, serving_token,
    unguarded_warning, FeatureLoggingConfig, ServingConfig,
};
pub use error::ApiError;
pub use feast::{OnlineFeaturesRequest, OnlineFeaturesResponse};
pub use feature_log::{FeatureLog, FeatureLogError};
pub use guard::Guard;
pub use lookup::{Found, Lookup};
pub use query_error::QueryError;
pub use read_cache::{CachedRow, ReadCache};
pub use reader::FeatureReader;
pub use server::{router, serve_reads};
pub use state::{Reads, ServingState};
pub use values::{feast_float, ValueStyle};
pub use view::FeatureView;
