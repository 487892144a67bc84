//! Aggregated features at read time: an entity's tiles read in the same round trip as its
//! stored values and merged for each window at the time of the read, so values decay as
//! windows pass without any new event. The read cache keeps stored values only; tiles are
//! read from Redis by every request.

use redis::Cmd;
use serde_json::Value;

use super::lookup::Lookup;
use super::query_error::QueryError;
use super::values::{feast_float, ValueStyle};
use crate::aggregate::{Datum, Output};
use crate::redis::tiles::TILES_FIELD;

/// Per lookup, per entity, per feature asked: its value when it is an aggregated feature,
/// `None` for a plain one; a lookup asking no aggregated feature gets no rows.
pub type AggregatedValues = Vec<Vec<Vec<Option<Output>>>>;

/// Whether `lookup` asks any aggregated feature.
fn asks(lookup: &Lookup<'_>) -> bool {
    let plain = lookup.view.plain_features();
    lookup.view.tiles.is_some() && lookup.features.iter().any(|&f| f >= plain)
}

/// The reads of the tiles the `lookups` need: one `HMGET` of the tiles field per entity of
/// each lookup asking an aggregated feature (none for the others).
pub fn tile_commands(lookups: &[Lookup<'_>]) -> Vec<Cmd> {
    let mut commands = Vec::new();
    for lookup in lookups.iter().filter(|l| asks(l)) {
        let Some(tiles) = &lookup.view.tiles else {
            continue;
        };
        for entity in &lookup.entities {
            let mut command = redis::cmd("HMGET");
            command.arg(tiles.key(entity)).arg(TILES_FIELD);
            commands.push(command);
        }
    }
    commands
}

/// The aggregated features the `lookups` ask at `now` (ms since 1970), from the `replies`
/// to [`tile_commands`].
pub fn aggregated_values(
    lookups: &[Lookup<'_>],
    replies: Vec<Vec<Option<Vec<u8>>>>,
    now: i64,
) -> Result<AggregatedValues, QueryError> {
    let mut replies = replies.into_iter();
    let mut out = Vec::with_capacity(lookups.len());
    for lookup in lookups {
        let (Some(tiles), true) = (&lookup.view.tiles, asks(lookup)) else {
            out.push(Vec::new());
            continue;
        };
        let plain = lookup.view.plain_features();
        let mut rows = Vec::with_capacity(lookup.entities.len());
        for (entity, reply) in lookup.entities.iter().zip(replies.by_ref()) {
            let value = reply.into_iter().next().flatten();
            let stored = tiles.decode(&tiles.key(entity), value.as_deref())?;
            let values = tiles.read(&stored, now);
            rows.push(
                lookup
                    .features
                    .iter()
                    .map(|&f| f.checked_sub(plain).and_then(|i| values.get(i).cloned()))
                    .collect(),
            );
        }
        out.push(rows);
    }
    Ok(out)
}

/// An aggregated value as JSON in `style`: numbers, `null` for an empty window's mean or
/// extreme, and `last_k`'s values as an array, newest first.
pub fn output_json(output: &Output, style: ValueStyle) -> Value {
    let float = |f: f64| match style {
        ValueStyle::Feast => feast_float(f),
        ValueStyle::Typed => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
    };
    match output {
        Output::Int(i) => Value::from(*i),
        Output::Float(f) => float(*f),
        Output::Null => Value::Null,
        Output::List(values) => Value::Array(
            values
                .iter()
                .map(|d| match d {
                    Datum::Int(i) => Value::from(*i),
                    Datum::Float(f) => float(*f),
                    Datum::Text(s) => Value::String(s.clone()),
                    Datum::Bool(b) => Value::Bool(*b),
                })
                .collect(),
        ),
    }
}
