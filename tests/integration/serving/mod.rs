//! The serving listener: its guard and token, hostile requests, the read cache, Feast's SDK
//! reading through `/get-online-features` (and the errors it raises from our answers), and
//! the log of served features.

mod cache;
mod feast;
mod feast_errors;
mod feature_log;
mod guard;
mod hostile;
