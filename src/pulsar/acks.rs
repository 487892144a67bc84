//! Which acknowledgements to send for a run of durable messages.
//!
//! pulsar-rs has no batch-index acknowledgement: acknowledging any message of a producer
//! batch acknowledges its whole entry. So an entry is acknowledged only through its last
//! message, which lanes process after all earlier messages of that entry.

use std::collections::BTreeMap;

use crate::source::AckMode;
use crate::source::MessagePosition;

/// One acknowledgement to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckTarget<'a> {
    /// Acknowledge this entry only.
    Individual(&'a MessagePosition),
    /// Acknowledge this entry and everything before it on its topic.
    Cumulative(&'a MessagePosition),
}

/// The acknowledgements that cover `durable` (in receive order) without acknowledging any
/// message of an entry whose later messages are not durable yet.
pub fn acks_for(durable: &[MessagePosition], mode: AckMode) -> Vec<AckTarget<'_>> {
    match mode {
        AckMode::Individual => durable
            .iter()
            .filter(|p| p.completes_entry())
            .map(AckTarget::Individual)
            .collect(),
        AckMode::Cumulative => {
            let mut newest: BTreeMap<&str, &MessagePosition> = BTreeMap::new();
            for position in durable.iter().filter(|p| p.completes_entry()) {
                newest.insert(position.topic.as_ref(), position);
            }
            newest.into_values().map(AckTarget::Cumulative).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(topic: &str, entry: u64, index: Option<i32>, size: Option<i32>) -> MessagePosition {
        MessagePosition {
            topic: topic.into(),
            offset: (1, entry, index.unwrap_or(-1)),
            entry_size: size,
            origin: None,
        }
    }

    #[test]
    fn individual_acks_skip_unfinished_entries() {
        let durable = vec![
            pos("t", 1, None, None),
            pos("t", 2, Some(0), Some(3)),
            pos("t", 2, Some(1), Some(3)),
        ];
        let acks = acks_for(&durable, AckMode::Individual);
        assert_eq!(acks, vec![AckTarget::Individual(&durable[0])]);
        let rest = vec![pos("t", 2, Some(2), Some(3))];
        assert_eq!(
            acks_for(&rest, AckMode::Individual),
            vec![AckTarget::Individual(&rest[0])]
        );
    }

    #[test]
    fn cumulative_ack_is_newest_complete_entry_per_topic() {
        let durable = vec![
            pos("a", 1, None, None),
            pos("b", 7, None, None),
            pos("a", 2, Some(0), Some(2)),
            pos("a", 2, Some(1), Some(2)),
            pos("a", 3, Some(0), Some(2)),
        ];
        let acks = acks_for(&durable, AckMode::Cumulative);
        assert_eq!(
            acks,
            vec![
                AckTarget::Cumulative(&durable[3]),
                AckTarget::Cumulative(&durable[1])
            ]
        );
    }
}
