//! The serving listener: its guard and token, hostile requests, the read cache, and Feast's
//! SDK reading through `/get-online-features` (and the errors it raises from our answers).

mod cache;
mod feast;
mod feast_errors;
mod guard;
mod hostile;
