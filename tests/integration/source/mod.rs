//! The source side (Pulsar and what arrives from it): subscriptions and delivery, topic
//! shapes, schemas and bad input (the dead-letter topic, fuzz regressions), and the
//! broker's security (token, TLS, client certificates, OAuth2); and that a happy path,
//! pulsar-rs's included, logs no warning.

mod bad_input;
mod delivery;
mod fuzz_regressions;
mod mtls;
mod oauth2;
mod quiet_logs;
mod schemas;
mod security;
mod subscriptions;
mod topics;
