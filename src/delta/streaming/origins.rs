//! Replicated copies in the offline table (see `pulsar::replication`).
//!
//! A sidecar commits, per stream it reads, its own position as always: that fences the
//! replicas of one region against each other. A copy replicated from another cluster is
//! one of two things:
//! - with [`OfflineOrigins::OwnRegion`], not a row at all: the origin's sidecar commits it;
//! - with [`OfflineOrigins::AllRegions`], a row under its origin's position too: a commit
//!   records, for each origin stream it holds copies of, the newest origin offset, and a copy
//!   at or below what the table holds for its origin is already in the table (committed by
//!   the origin's sidecar before a take-over, or by this one).
//!
//! Copies of one origin stream arrive in that stream's order (the replicator sends them in
//! order), so "every copy up to the recorded offset is in" holds as it does for a stream's
//! own messages.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::error::ArrowError;

use crate::delta::table::positions::commit_key_at;
#[cfg(test)]
use crate::delta::table::positions::WHOLE_ENTRY;
use crate::delta::{CommittedPositions, MessageKey};
use crate::record::{drop_rows, RowBatch};
use crate::source::{same_stream, MessagePosition, Origin};

/// The origin of a copy whose origin offset is known.
fn known_origin(position: &MessagePosition) -> Option<(&Arc<Origin>, MessageKey)> {
    let origin = position.origin.as_ref()?;
    Some((origin, origin.offset?))
}

/// Whether the table already holds `position` as a copy of its origin.
pub fn held_at_origin(position: &MessagePosition, held: &CommittedPositions) -> bool {
    known_origin(position).is_some_and(|(origin, offset)| {
        held.get(&origin.stream)
            .is_some_and(|committed| offset <= committed)
    })
}

/// The origin streams of the copies among `positions`, in first-seen order.
pub fn origin_streams<'a>(positions: impl Iterator<Item = &'a MessagePosition>) -> Vec<Arc<str>> {
    let mut streams: Vec<Arc<str>> = Vec::new();
    for (origin, _) in positions.filter_map(known_origin) {
        if !streams.iter().any(|s| same_stream(s, &origin.stream)) {
            streams.push(origin.stream.clone());
        }
    }
    streams
}

/// Per origin stream, the key a commit of `positions` records: its newest copy.
pub fn origin_commit_keys<'a>(
    positions: impl Iterator<Item = &'a MessagePosition>,
) -> BTreeMap<String, MessageKey> {
    let mut keys: BTreeMap<String, MessageKey> = BTreeMap::new();
    for position in positions {
        let Some((origin, offset)) = known_origin(position) else {
            continue;
        };
        let key = commit_key_at(position, offset);
        match keys.get_mut(origin.stream.as_ref()) {
            Some(newest) => *newest = (*newest).max(key),
            None => {
                keys.insert(origin.stream.to_string(), key);
            }
        }
    }
    keys
}

/// `batch` without the rows of copies (their messages stay, to be acknowledged); returns
/// how many rows went.
pub fn drop_copies(batch: &mut RowBatch) -> Result<usize, ArrowError> {
    let positions = &batch.positions;
    drop_rows(&mut batch.rows, &mut batch.row_positions, |m| {
        positions.get(m).is_none_or(|p| p.origin.is_none())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};

    fn copy(entry: u64, origin_entry: u64, index: i32, size: Option<i32>) -> MessagePosition {
        MessagePosition {
            topic: "b/t".into(),
            offset: (9, entry, index),
            entry_size: size,
            origin: Some(Arc::new(Origin {
                stream: "a/t".into(),
                offset: Some((3, origin_entry, index)),
            })),
        }
    }

    fn local(entry: u64) -> MessagePosition {
        MessagePosition {
            topic: "b/t".into(),
            offset: (9, entry, -1),
            entry_size: None,
            origin: None,
        }
    }

    #[test]
    fn a_copy_is_held_by_its_origins_position() {
        let mut held = CommittedPositions::default();
        held.set("a/t", Some((3, 10, WHOLE_ENTRY)));
        assert!(held_at_origin(&copy(50, 10, -1, None), &held));
        assert!(!held_at_origin(&copy(51, 11, -1, None), &held));
        assert!(!held_at_origin(&local(5), &held), "not a copy");
        let unknown = MessagePosition {
            origin: Some(Arc::new(Origin {
                stream: "a/t".into(),
                offset: None,
            })),
            ..local(6)
        };
        assert!(
            !held_at_origin(&unknown, &held),
            "no origin offset: not known to be held"
        );
    }

    #[test]
    fn commit_keys_per_origin_are_the_newest_copy() {
        let positions = [
            copy(1, 20, 0, Some(2)),
            copy(1, 20, 1, Some(2)),
            local(2),
            copy(3, 25, 0, Some(2)),
        ];
        let keys = origin_commit_keys(positions.iter());
        assert_eq!(keys.len(), 1);
        assert_eq!(
            keys["a/t"],
            (3, 25, 0),
            "the batch of entry 25 is not complete"
        );
        assert_eq!(origin_streams(positions.iter()).len(), 1);
        let complete = origin_commit_keys(positions[..2].iter());
        assert_eq!(complete["a/t"], (3, 20, WHOLE_ENTRY));
    }

    #[test]
    fn copies_lose_their_rows_and_keep_their_messages() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let rows =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap();
        let mut batch = RowBatch {
            rows,
            positions: vec![local(1), copy(2, 7, -1, None), local(3)],
            row_positions: vec![0, 1, 2],
            publish_times_ms: vec![0, 0, 0],
        };
        assert_eq!(drop_copies(&mut batch).unwrap(), 1);
        assert_eq!(batch.rows.num_rows(), 2);
        assert_eq!(batch.row_positions, vec![0, 2]);
        assert_eq!(batch.positions.len(), 3);
    }
}
