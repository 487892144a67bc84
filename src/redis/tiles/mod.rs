//! Aggregation tiles in Redis: where an entity's tiles live ([`TileLayout`]), how a batch's
//! events update them atomically and harmlessly on replay, and the sink that does it for a
//! pipeline's `aggregations:` ([`TileSinkBuilder`]). Reads are the `serving` module's: it
//! reads the tiles field ([`TILES_FIELD`]) and [`TileLayout::read`]s them at the time
//! of the read, so values decay as windows pass.

mod cache;
mod events;
mod layout;
mod sink;
mod update;

pub use layout::{
    decode_positions, encode_positions, tiles_key, TileError, TileLayout, TileSection,
    POSITIONS_FIELD, TILES_FIELD, VERSION_FIELD,
};
pub use sink::TileSinkBuilder;
