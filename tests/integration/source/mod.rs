//! The source side (Pulsar and what arrives from it): subscriptions and delivery, topic
//! shapes, schemas and bad input (the dead-letter topic, fuzz regressions), and the
//! broker's security (token, TLS, client certificates, OAuth2).

mod bad_input;
mod delivery;
mod fuzz_regressions;
mod mtls;
mod oauth2;
mod schemas;
mod security;
mod subscriptions;
mod topics;
