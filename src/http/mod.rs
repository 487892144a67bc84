//! The process's two HTTP listeners, each on its own bind address:
//!
//! - probes (`http.bind`): `/healthz`, `/readyz`, `/metrics`; safe to expose to kubelet and
//!   Prometheus ([`probes`]);
//! - feature reads (`serving.bind`, loopback by default): Feast's `POST /get-online-features`
//!   and `/v1/features/{view}`, behind a bearer token when reachable from the network, with
//!   bounded bodies, entities, time and concurrency ([`serving`]).
//!
//! Every refusal of a read is a 4xx (or 503) with a JSON body `{"error": "..."}` ([`error`]).

mod body;
mod error;
mod feast;
mod features;
mod guard;
mod listener;
mod probes;
mod serving;
mod setup;

pub use error::ApiError;
pub use feast::{OnlineFeaturesRequest, OnlineFeaturesResponse};
pub use guard::Guard;
pub use listener::HttpError;
pub use probes::{serve_probes, ProbeState};
pub use serving::{router as serving_router, serve_reads, Reads, ServingState};
pub use setup::{feature_service_issues, serving_token, unguarded_warning};
