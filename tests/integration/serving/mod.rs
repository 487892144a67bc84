//! The serving listener: its guard and token, hostile requests, the read cache, and Feast's
//! SDK reading through `/get-online-features`.

mod cache;
mod feast;
mod guard;
mod hostile;
