//! A batch's rows as each entity's events, one per aggregation per message, in delivery
//! order.

use std::sync::Arc;

use arrow::error::ArrowError;
use rustc_hash::FxHashMap;

use super::layout::TileLayout;
use crate::aggregate::{AggregatedColumns, Event};
use crate::record::{event_time_millis, KeyText, RowBatch, RowLayout};
use crate::source::Offset;

/// One message of an entity: where it is in its stream, and its event for each aggregation.
#[derive(Debug, Clone)]
pub struct Message {
    /// Its stream (topic partition).
    pub stream: Arc<str>,
    /// Its position in the stream.
    pub offset: Offset,
    /// Its index among the batch's messages.
    pub index: usize,
    /// One event per aggregation, in the layout's order.
    pub events: Vec<Event>,
}

/// An entity's messages in a batch.
#[derive(Debug, Clone)]
pub struct EntityEvents {
    /// The hash of its tiles.
    pub key: String,
    /// Its messages in delivery order.
    pub messages: Vec<Message>,
}

/// The entities of `batch` (rows shaped by `rows`) with their messages, in order of first
/// appearance. Rows without a key or event time are skipped (the decoder rejects them).
pub fn entity_events(
    layout: &TileLayout,
    rows: &RowLayout,
    batch: &RowBatch,
) -> Result<Vec<EntityEvents>, ArrowError> {
    let records = &batch.rows;
    let column = |name: &str| {
        records
            .column_by_name(name)
            .ok_or_else(|| ArrowError::SchemaError(format!("row batch lacks `{name}`")))
    };
    let keys = KeyText::new(
        rows.keys
            .iter()
            .map(|k| column(k))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    let times = column(&rows.event_time)?;
    // Per aggregation its column's values; `None`: a count of events.
    let values = AggregatedColumns::read(layout.aggregations(), column)?;

    let mut entities: Vec<EntityEvents> = Vec::new();
    let mut index: FxHashMap<String, usize> = FxHashMap::default();
    // The key is written into one buffer per row; only a new entity's key is copied.
    let key_start = layout.key_start();
    let mut key = String::with_capacity(key_start.len() + 32);
    for row in 0..records.num_rows() {
        let Some(event_time) = event_time_millis(times, row) else {
            continue;
        };
        if keys.has_null(row) {
            continue;
        }
        key.clear();
        key.push_str(&key_start);
        keys.append(row, ":", &mut key)?;
        let Some((message, position)) = batch
            .row_positions
            .get(row)
            .and_then(|&m| batch.positions.get(m).map(|p| (m, p)))
        else {
            continue;
        };
        let publish_time = batch
            .publish_times_ms
            .get(message)
            .map_or(0, |&ms| i64::try_from(ms).unwrap_or(i64::MAX));
        let events = values.events(row, event_time, publish_time);
        let slot = match index.get(key.as_str()) {
            Some(&slot) => slot,
            None => {
                index.insert(key.clone(), entities.len());
                entities.push(EntityEvents {
                    key: key.clone(),
                    messages: Vec::new(),
                });
                entities.len() - 1
            }
        };
        entities[slot].messages.push(Message {
            stream: position.topic.clone(),
            offset: position.offset,
            index: message,
            events,
        });
    }
    Ok(entities)
}

/// What a held message applies later: its rows' events, each with its entity's hash.
pub type HeldMessage = Vec<(String, Message)>;

/// Takes out of `entities` the messages that are not `ready` (by index in the batch), as
/// each message's rows; entities left without messages are dropped.
pub fn take_held(
    entities: &mut Vec<EntityEvents>,
    ready: &[bool],
) -> FxHashMap<usize, HeldMessage> {
    let mut held: FxHashMap<usize, HeldMessage> = FxHashMap::default();
    for entity in entities.iter_mut() {
        for message in entity
            .messages
            .extract_if(.., |m| !ready.get(m.index).copied().unwrap_or(true))
        {
            held.entry(message.index)
                .or_default()
                .push((entity.key.clone(), message));
        }
    }
    entities.retain(|e| !e.messages.is_empty());
    held
}

/// Adds released messages' rows to `entities` (an entity's messages stay in order: a
/// stream's released messages precede its messages in the batch, which were all held).
pub fn add_released(entities: &mut Vec<EntityEvents>, released: Vec<HeldMessage>) {
    let mut index: FxHashMap<String, usize> = entities
        .iter()
        .enumerate()
        .map(|(slot, e)| (e.key.clone(), slot))
        .collect();
    for (key, message) in released.into_iter().flatten() {
        let slot = *index.entry(key.clone()).or_insert_with(|| {
            entities.push(EntityEvents {
                key,
                messages: Vec::new(),
            });
            entities.len() - 1
        });
        entities[slot].messages.push(message);
    }
}
