//! The load generator of feature-connector: deterministic sample feature events, open-loop
//! pacing, and the `produce` command that publishes them. Kept out of the production crate;
//! `feature-connector produce` runs this crate's binary.

pub mod pacing;
pub mod produce;
pub mod sample;
