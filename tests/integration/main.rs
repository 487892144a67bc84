//! Integration tests against the real services started by `scripts/services.sh`
//! (Pulsar standalone, redis-server, moto S3) — one test binary so it builds once.
//! Grouped by area: `aggregations` (windowed features), `source` (the Pulsar side), `online` (Redis), `offline` (the Delta
//! table), `serving` (the read listener), `consistency` (the audit of online against
//! offline) and `config_cli` (config checks, deploy files); `common` is their shared harness.

// A test's unwrap is its assertion: a failure there fails the test with its cause. Tests
// signal the processes they start (SIGTERM, SIGKILL, SIGSTOP) through libc.
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

mod aggregations;
mod common;
mod config_cli;
mod consistency;
mod geo;
mod offline;
mod online;
mod serving;
mod source;
