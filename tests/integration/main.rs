//! Integration tests against the real services started by `scripts/services.sh`
//! (Pulsar standalone, redis-server, moto S3) — one test binary so it builds once.

// A test's unwrap is its assertion: a failure there fails the test with its cause. Tests
// signal the processes they start (SIGTERM, SIGKILL, SIGSTOP) through libc.
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

mod bad_input;
mod common;
mod delivery;
mod delta;
mod delta_maintenance;
mod deploy;
mod end_to_end;
mod feast;
mod feast_offline;
mod fuzz_regressions;
mod isolation;
mod mtls;
mod oauth2;
mod offline;
mod online;
mod redis_outage;
mod schemas;
mod security;
mod serving_cache;
mod serving_feast;
mod serving_guard;
mod serving_hostile;
mod subscriptions;
mod topics;
mod validate;
