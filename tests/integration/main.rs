//! Integration tests against the real services started by `scripts/services.sh`
//! (Pulsar standalone, redis-server, moto S3) — one test binary so it builds once.
//! Grouped by area: `source` (the Pulsar side), `online` (Redis), `offline` (the Delta
//! table), `serving` (the read listener) and `config_cli` (config checks, deploy files);
//! `common` is their shared harness.

mod common;
mod config_cli;
mod offline;
mod online;
mod serving;
mod source;
