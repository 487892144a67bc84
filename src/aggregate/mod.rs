//! Windowed aggregations of a pipeline's events: counts, sums, means, extremes, the newest
//! values and estimated distinct values over windows of event time, kept as tiles and read
//! at any time.
//!
//! The rules, which the online tiles and the offline point-in-time computation share:
//!
//! - **Window shape.** A read at `t` of a window of length `W` covers event times in
//!   `[floor((t − W) / hop) · hop, floor(t / hop) · hop + hop)` ([`Window`]): the tail is
//!   aligned to the hop (1 day for windows from 12 days, 1 hour from 12 hours, else 5
//!   minutes), so a value holds at most one hop of events older than `t − W`.
//! - **As known at `t`.** Only events published at or before `t` count at `t`, whatever their
//!   event time ([`value_at`]).
//! - **Late events.** An event that no read at or after its publish time can cover is dropped
//!   and counted, never applied ([`Applied::Late`]); it changes no value a read can return.
//! - **Replays are harmless.** Per stream, the position of the newest event the tiles hold
//!   is kept with them; a redelivered event is not applied again ([`AppliedPositions`]).
//! - **Future events.** An event stamped more than the allowed skew after its publish time
//!   is refused ([`is_future`]), never applied.
//! - **Decay.** A read merges the tiles its window covers at the time of the read, so values
//!   fall as events age out without any new event.

mod codec;
mod column;
mod config;
mod function;
mod point_in_time;
mod replay;
mod rows;
mod sketch;
mod tiles;
mod window;

#[cfg(test)]
mod tests;

pub use codec::{decode_tiles, encode_tiles, CodecError};
pub use column::{datums, Kind};
pub use config::{check_aggregations, Aggregation, AggregationConfig, Fields, MAX_K};
pub use function::{empty_output, Datum, Function, OrderKey, Output, State};
pub use point_in_time::{value_at, values_at_times};
pub use replay::{is_future, AppliedPositions, ReplayOutcome};
pub use rows::{longest_hop_ms, longest_reach_ms, AggregatedColumns};
pub use sketch::Sketch;
pub use tiles::{AggregationSpec, Applied, Event, Tiles};
pub use window::{duration_name, hop_for, tile_start, Window, WindowError, MAX_WINDOW_MS};
