//! Ties between equal event times in a geo-replicated namespace (`pulsar.replication`).
//!
//! Each region's sidecar writes its own Redis, and two events of one entity with the same
//! event time reach the regions in different orders (each region sees its own first), so
//! "the later write wins" would leave the regions' stores different. With replication on,
//! a tie goes to the event with the greater tie value `<publish ms, 20 digits>:<origin
//! cluster>`: the broker publish time (set once where the message was first written and
//! carried unchanged on replicated copies), then the name of the cluster it was first
//! written to. Fixed width, so byte order is that order. The value is stored with the entity
//! (`_tie`, or `_tie:<view>` in the Feast layout) for the latest-wins script to compare.

use std::fmt::Write as _;

use crate::record::RowBatch;
use crate::source::MessagePosition;

/// The tie value's field in the native layout (next to `_ts`).
pub const TIE_FIELD: &str = "_tie";

/// Digits of the zero-padded publish time (`u64::MAX` has 20).
const PUBLISH_DIGITS: usize = 20;

/// The cluster a message was first written to: the part of its origin stream (a replicated
/// copy) or its own stream (a message first written here) before the first `/`; with
/// replication on, streams are named `<cluster>/<topic partition>`.
pub fn origin_cluster(position: &MessagePosition) -> &str {
    let stream = position
        .origin
        .as_ref()
        .map_or(position.topic.as_ref(), |origin| origin.stream.as_ref());
    stream
        .split_once('/')
        .map_or(stream, |(cluster, _)| cluster)
}

/// Appends `<publish_ms zero-padded to 20 digits>:<cluster>` to `out`.
pub fn push_tie_value(out: &mut String, publish_ms: u64, cluster: &str) {
    let _ = write!(
        out,
        "{publish_ms:0width$}:{cluster}",
        width = PUBLISH_DIGITS
    );
}

/// The tie value of every row of a batch, from the message each row came from.
#[derive(Debug, Clone)]
pub struct RowTies<'a> {
    /// Tie values of the batch's messages, back to back.
    text: String,
    /// End of each message's value in `text`.
    ends: Vec<usize>,
    /// For each row, the index of its message.
    row_messages: &'a [usize],
}

impl<'a> RowTies<'a> {
    /// The tie values of `batch`'s rows.
    pub fn of(batch: &'a RowBatch) -> Self {
        let mut text = String::with_capacity(batch.positions.len() * (PUBLISH_DIGITS + 12));
        let mut ends = Vec::with_capacity(batch.positions.len());
        for (index, position) in batch.positions.iter().enumerate() {
            let publish_ms = batch.publish_times_ms.get(index).copied().unwrap_or(0);
            push_tie_value(&mut text, publish_ms, origin_cluster(position));
            ends.push(text.len());
        }
        Self {
            text,
            ends,
            row_messages: &batch.row_positions,
        }
    }

    /// The tie value of `row` (empty, losing every tie, for a row without a message).
    pub fn row(&self, row: usize) -> &[u8] {
        let Some(&message) = self.row_messages.get(row) else {
            return b"";
        };
        let Some(&end) = self.ends.get(message) else {
            return b"";
        };
        let start = message.checked_sub(1).map_or(0, |i| self.ends[i]);
        &self.text.as_bytes()[start..end]
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch};

    use super::*;
    use crate::source::Origin;

    fn at(topic: &str, origin: Option<&str>) -> MessagePosition {
        MessagePosition {
            topic: topic.into(),
            offset: (1, 2, -1),
            entry_size: None,
            origin: origin.map(|stream| {
                Arc::new(Origin {
                    stream: stream.into(),
                    offset: None,
                })
            }),
        }
    }

    #[test]
    fn a_copy_ties_as_its_origin_a_local_message_as_its_stream() {
        let topic = "persistent://geo/features/t-partition-0";
        let local = at(&format!("east/{topic}"), None);
        let copy = at(&format!("east/{topic}"), Some(&format!("west/{topic}")));
        assert_eq!(origin_cluster(&local), "east");
        assert_eq!(origin_cluster(&copy), "west");

        let rows = RecordBatch::try_from_iter(vec![(
            "ts",
            Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
        )])
        .unwrap();
        let batch = RowBatch {
            rows,
            positions: vec![local, copy],
            // The first message has two rows.
            row_positions: vec![0, 0, 1],
            publish_times_ms: vec![1_792_000_000_123, 7],
        };
        let ties = RowTies::of(&batch);
        assert_eq!(ties.row(0), b"00000001792000000123:east");
        assert_eq!(ties.row(1), b"00000001792000000123:east");
        assert_eq!(ties.row(2), b"00000000000000000007:west");
        assert_eq!(ties.row(3), b"");
        // Fixed width: byte order is publish time order, then the cluster name.
        assert!(ties.row(2) < ties.row(0));
        let mut same_ms = String::new();
        push_tie_value(&mut same_ms, 1_792_000_000_123, "west");
        assert!(ties.row(0) < same_ms.as_bytes());
    }
}
