//! HTTP plumbing shared by the process's two listeners, each on its own bind address:
//!
//! - probes (`http.bind`): `/healthz`, `/readyz`, `/metrics`; safe to expose to kubelet and
//!   Prometheus (`probes`);
//! - feature reads (`serving.bind`), whose routes are the `serving` module's.
//!
//! Both run on [`listener`]'s accept loop (header timeout, connection cap, graceful drain);
//! every refusal is a JSON body `{"error": "..."}` ([`json_error`]).

mod error;
pub mod listener;
mod probes;

pub use error::json_error;
pub use listener::HttpError;
pub use probes::{serve_probes, ProbeState};
