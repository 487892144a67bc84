//! Aggregation tiles in Redis: where an entity's tiles live ([`TileLayout`]), how a batch's
//! events update them atomically and harmlessly on replay, and the sink that does it for a
//! pipeline's `aggregations:` ([`TileSinkBuilder`]). Reads are the `serving` module's: it
//! reads the fields [`TileLayout::fields`] names and [`TileLayout::read`]s them at the time
//! of the read, so values decay as windows pass.

mod events;
mod layout;
mod sink;
mod update;

pub use layout::{tiles_key, TileError, TileField, TileLayout, POSITIONS_FIELD, VERSION_FIELD};
pub use sink::TileSinkBuilder;
