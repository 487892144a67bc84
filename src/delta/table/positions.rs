//! What the table says each topic partition has committed, kept in Delta application
//! transactions (`txn` actions).
//!
//! A Delta `txn` carries one 64-bit version per application id; a Pulsar message id is three
//! numbers (ledger, entry, index in the producer batch) with no order-preserving 64-bit
//! encoding. Each commit therefore records, per topic partition it holds rows of, three `txn`
//! actions, `<partition>#ledger`, `<partition>#entry` and `<partition>#batch`, written in the
//! same commit and so read back together. Two writers that commit the same partition touch the
//! same application ids, which is what Delta's optimistic concurrency checks: the second
//! writer's commit fails with a concurrent-transaction conflict instead of landing twice.

use std::collections::HashMap;

use deltalake::kernel::{Action, Transaction};

pub use crate::source::{continues_key, WHOLE_ENTRY};
use crate::source::{MessagePosition, Offset};

/// Orders messages within one topic partition: ledger, entry, index in the producer batch
/// (-1 when not batched).
pub type MessageKey = Offset;

/// The ordering key of a message.
pub fn message_key(position: &MessagePosition) -> MessageKey {
    position.offset
}

/// The key a commit records when `position` is the newest message of a partition it holds.
pub fn commit_key(position: &MessagePosition) -> MessageKey {
    position.run_key()
}

/// [`commit_key`] in another id space of the same message: `offset` is its key there (a
/// replicated copy's offset in its origin), its place in its entry is the same.
pub fn commit_key_at(position: &MessagePosition, offset: MessageKey) -> MessageKey {
    position.run_key_at(offset)
}

/// Whether `next` is the message right after `held` (a commit key) in its partition: the
/// next index of the same entry, or the first message of the next entry or of a newer ledger.
pub fn continues(held: MessageKey, next: &MessagePosition) -> bool {
    continues_key(held, message_key(next))
}

const PREFIX: &str = "feature-connector:";
const LEDGER: &str = "#ledger";
const ENTRY: &str = "#entry";
const BATCH: &str = "#batch";

/// The three application ids that hold `partition`'s committed position.
pub fn app_ids(partition: &str) -> [String; 3] {
    [LEDGER, ENTRY, BATCH].map(|part| format!("{PREFIX}{partition}{part}"))
}

/// The `txn` actions recording that `partition` is committed up to `key`.
pub fn transactions(partition: &str, key: MessageKey, now_ms: i64) -> Vec<Transaction> {
    let [ledger, entry, batch] = app_ids(partition);
    // Ledger and entry ids are u64 in Pulsar's protocol but allocated from 0 upwards: they
    // stay far below 2^63, so the cast is lossless (a larger one is refused in `versions`).
    vec![
        Transaction::new_with_last_update(ledger, key.0 as i64, Some(now_ms)),
        Transaction::new_with_last_update(entry, key.1 as i64, Some(now_ms)),
        Transaction::new_with_last_update(batch, i64::from(key.2), Some(now_ms)),
    ]
}

/// Whether `key` can be stored losslessly in `txn` versions.
pub fn representable(key: MessageKey) -> bool {
    i64::try_from(key.0).is_ok() && i64::try_from(key.1).is_ok()
}

/// The key that three `txn` versions (ledger, entry, batch) stand for; `None` unless all three
/// are present and in range.
pub fn key_from_versions(
    ledger: Option<i64>,
    entry: Option<i64>,
    batch: Option<i64>,
) -> Option<MessageKey> {
    Some((
        u64::try_from(ledger?).ok()?,
        u64::try_from(entry?).ok()?,
        i32::try_from(batch?).ok()?,
    ))
}

/// Committed positions per topic partition, as of one table version.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CommittedPositions {
    by_partition: HashMap<String, Option<MessageKey>>,
}

impl CommittedPositions {
    /// Whether the position of `partition` has been looked up (it may be "nothing committed").
    pub fn knows(&self, partition: &str) -> bool {
        self.by_partition.contains_key(partition)
    }

    /// The last committed message of `partition`, if any.
    pub fn get(&self, partition: &str) -> Option<MessageKey> {
        self.by_partition.get(partition).copied().flatten()
    }

    /// Records what a lookup found for `partition`.
    pub fn set(&mut self, partition: &str, key: Option<MessageKey>) {
        self.by_partition.insert(partition.to_string(), key);
    }

    /// Applies the `txn` actions of one commit (in log order) to the partitions already known;
    /// returns the partitions whose position moved.
    pub fn apply(&mut self, actions: &[Action]) -> Vec<String> {
        let mut parts: HashMap<&str, [Option<i64>; 3]> = HashMap::new();
        for action in actions {
            let Action::Txn(txn) = action else { continue };
            let Some(rest) = txn.app_id.strip_prefix(PREFIX) else {
                continue;
            };
            let (partition, slot) = if let Some(p) = rest.strip_suffix(LEDGER) {
                (p, 0)
            } else if let Some(p) = rest.strip_suffix(ENTRY) {
                (p, 1)
            } else if let Some(p) = rest.strip_suffix(BATCH) {
                (p, 2)
            } else {
                continue;
            };
            parts.entry(partition).or_default()[slot] = Some(txn.version);
        }
        let mut moved = Vec::new();
        for (partition, [ledger, entry, batch]) in parts {
            if !self.knows(partition) {
                continue;
            }
            if let Some(key) = key_from_versions(ledger, entry, batch) {
                if self.get(partition) != Some(key) {
                    moved.push(partition.to_string());
                }
                self.set(partition, Some(key));
            }
        }
        moved.sort();
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position(topic: &str, ledger: u64, entry: u64, batch: Option<i32>) -> MessagePosition {
        MessagePosition {
            topic: topic.into(),
            offset: (ledger, entry, batch.unwrap_or(-1)),
            entry_size: batch.map(|_| 10),
            origin: None,
        }
    }

    #[test]
    fn keys_order_by_ledger_then_entry_then_batch_index() {
        let key = |l, e, b| message_key(&position("t", l, e, b));
        assert!(key(12, 7, Some(0)) > key(12, 7, None));
        assert!(key(13, 0, None) > key(12, 900, Some(3)));
        assert!(key(12, 8, Some(0)) > key(12, 7, Some(9)));
    }

    #[test]
    fn the_next_message_continues_a_commit_key() {
        let batched = |entry, index| MessagePosition {
            entry_size: Some(3),
            ..position("p", 7, entry, Some(index))
        };
        assert!(continues((7, 5, 1), &batched(5, 2)));
        assert!(
            !continues((7, 5, 1), &batched(6, 0)),
            "the rest of entry 5 first"
        );
        assert!(continues(commit_key(&batched(5, 2)), &batched(6, 0)));
        assert!(continues((7, 5, -1), &position("p", 7, 6, None)));
        assert!(
            continues((7, 5, WHOLE_ENTRY), &position("p", 9, 0, None)),
            "a newer ledger"
        );
        assert!(
            !continues((7, 5, WHOLE_ENTRY), &position("p", 7, 8, None)),
            "a gap"
        );
        assert!(!continues((7, 5, WHOLE_ENTRY), &position("p", 9, 3, None)));
    }

    #[test]
    fn a_commit_moves_known_partitions_only() {
        let mut positions = CommittedPositions::default();
        positions.set("t-partition-0", None);
        let now = 1;
        let actions: Vec<Action> = transactions("t-partition-0", (5, 9, 2), now)
            .into_iter()
            .chain(transactions("t-partition-1", (6, 1, -1), now))
            .map(Action::Txn)
            .collect();
        assert_eq!(positions.apply(&actions), vec!["t-partition-0".to_string()]);
        assert_eq!(positions.get("t-partition-0"), Some((5, 9, 2)));
        assert!(!positions.knows("t-partition-1"));
        let holds = |p: &MessagePosition| {
            positions
                .get(&p.topic)
                .is_some_and(|last| message_key(p) <= last)
        };
        assert!(holds(&position("t-partition-0", 5, 9, Some(2))));
        assert!(!holds(&position("t-partition-0", 5, 9, Some(3))));
        assert!(!holds(&position("t-partition-1", 1, 1, None)));
        // The same commit again moves nothing.
        assert!(positions.apply(&actions).is_empty());
    }

    #[test]
    fn versions_round_trip_and_partial_sets_are_ignored() {
        let txns = transactions("p", (u64::MAX >> 1, 3, -1), 0);
        let versions: Vec<i64> = txns.iter().map(|t| t.version).collect();
        assert_eq!(
            key_from_versions(Some(versions[0]), Some(versions[1]), Some(versions[2])),
            Some((u64::MAX >> 1, 3, -1))
        );
        assert_eq!(key_from_versions(Some(1), None, Some(0)), None);
        assert!(!representable((u64::MAX, 0, 0)));
        let mut positions = CommittedPositions::default();
        positions.set("p", Some((1, 1, 1)));
        positions.apply(&[Action::Txn(txns[0].clone())]);
        assert_eq!(
            positions.get("p"),
            Some((1, 1, 1)),
            "a lone ledger txn is not a position"
        );
    }
}
