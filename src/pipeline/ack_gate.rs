//! Which messages a lane may acknowledge when it feeds several sinks: only those every sink
//! has reported durable.

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::source::{same_stream, stream_runs, MessagePosition, Offset};

/// Counts, per received message, the sinks that have not made it durable yet.
///
/// Each sink reports each message durable once, in the order it received them (per topic
/// partition), so what the gate releases keeps that order and cumulative acknowledgement
/// stays safe. With one sink the gate passes everything through untouched.
///
/// This runs for every message: per partition the messages wait in offset order, so a
/// report finds its run of messages with one search and then walks them in order (the
/// hash map per message that this replaced was 3-4 % of the connector's CPU, most of it
/// cache misses).
#[derive(Debug)]
pub struct AckGate {
    sinks: usize,
    owed: FxHashMap<String, OwedInPartition>,
}

/// Per message of one partition, in offset order, the sinks that do not have it durable yet;
/// a released message stays (owing 0) until every message before it is released too.
#[derive(Debug, Default)]
struct OwedInPartition {
    slots: VecDeque<(Offset, usize)>,
}

impl OwedInPartition {
    /// A message received (again, after a redelivery: every sink owes it once more).
    fn receive(&mut self, offset: Offset, sinks: usize) {
        if self.slots.back().is_none_or(|(last, _)| *last < offset) {
            self.slots.push_back((offset, sinks));
            return;
        }
        match self.slots.binary_search_by(|(slot, _)| slot.cmp(&offset)) {
            Ok(index) => self.slots[index].1 = sinks,
            Err(index) => self.slots.insert(index, (offset, sinks)),
        }
    }

    /// The slot of `offset`, trying `hint` (the slot after the previous report) first.
    fn find(&self, offset: Offset, hint: usize) -> Option<usize> {
        match self.slots.get(hint) {
            Some((slot, _)) if *slot == offset => Some(hint),
            _ => self
                .slots
                .binary_search_by(|(slot, _)| slot.cmp(&offset))
                .ok(),
        }
    }

    /// Forgets the released messages at the front.
    fn drop_released_front(&mut self) {
        while self.slots.front().is_some_and(|(_, owed)| *owed == 0) {
            self.slots.pop_front();
        }
    }

    #[cfg(test)]
    fn pending(&self) -> usize {
        self.slots.iter().filter(|(_, owed)| *owed > 0).count()
    }
}

impl AckGate {
    /// A gate for a lane feeding `sinks` sinks.
    pub fn new(sinks: usize) -> Self {
        Self {
            sinks,
            owed: FxHashMap::default(),
        }
    }

    /// The lane handed these messages to every sink.
    pub fn received(&mut self, positions: &[MessagePosition]) {
        if self.sinks <= 1 {
            return;
        }
        for run in stream_runs(positions) {
            let topic = run[0].topic.as_ref();
            if !self.owed.contains_key(topic) {
                self.owed
                    .insert(topic.to_string(), OwedInPartition::default());
            }
            if let Some(owed) = self.owed.get_mut(topic) {
                for position in run {
                    owed.receive(position.offset, self.sinks);
                }
            }
        }
    }

    /// One sink made `positions` durable; returns those that every sink now has, in the
    /// order given.
    pub fn durable(&mut self, positions: Vec<MessagePosition>) -> Vec<MessagePosition> {
        if self.sinks <= 1 {
            return positions;
        }
        let mut released = Vec::with_capacity(positions.len());
        // Positions come in runs of one partition sharing one name: look the partition up
        // once per run, and each message next to the previous one.
        let mut run: Option<(Arc<str>, Option<&mut OwedInPartition>)> = None;
        let mut hint = 0;
        for position in positions {
            if !run
                .as_ref()
                .is_some_and(|(topic, _)| same_stream(topic, &position.topic))
            {
                if let Some((_, Some(previous))) = run.take() {
                    previous.drop_released_front();
                }
                let owed = self.owed.get_mut(position.topic.as_ref());
                run = Some((position.topic.clone(), owed));
                hint = 0;
            }
            let Some((_, Some(partition))) = run.as_mut() else {
                tracing::debug!(message_id = %position.display_id(), "a sink reported a message of a partition the lane does not wait for");
                continue;
            };
            let Some(index) = partition.find(position.offset, hint) else {
                tracing::debug!(message_id = %position.display_id(), "a sink reported a message the lane does not wait for");
                continue;
            };
            hint = index + 1;
            let owed = &mut partition.slots[index].1;
            match *owed {
                0 => {
                    tracing::debug!(message_id = %position.display_id(), "a sink reported a message released already");
                }
                1 => {
                    *owed = 0;
                    released.push(position);
                }
                _ => *owed -= 1,
            }
        }
        if let Some((_, Some(partition))) = run {
            partition.drop_released_front();
        }
        released
    }

    /// Messages some sink does not have durable yet.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.owed.values().map(OwedInPartition::pending).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(entry: u64) -> MessagePosition {
        MessagePosition {
            topic: "t".into(),
            offset: (1, entry, -1),
            entry_size: None,
            origin: None,
        }
    }

    fn entries(positions: &[MessagePosition]) -> Vec<u64> {
        positions.iter().map(|p| p.offset.1).collect()
    }

    #[test]
    fn one_sink_passes_through() {
        let mut gate = AckGate::new(1);
        gate.received(&[at(1), at(2)]);
        assert_eq!(entries(&gate.durable(vec![at(1), at(2)])), vec![1, 2]);
        assert_eq!(gate.pending(), 0);
    }

    #[test]
    fn released_only_when_every_sink_has_it() {
        let mut gate = AckGate::new(2);
        gate.received(&[at(1), at(2), at(3)]);
        assert!(gate.durable(vec![at(1), at(2), at(3)]).is_empty());
        assert_eq!(entries(&gate.durable(vec![at(1), at(2)])), vec![1, 2]);
        assert_eq!(gate.pending(), 1);
        assert_eq!(entries(&gate.durable(vec![at(3)])), vec![3]);
        assert_eq!(gate.pending(), 0);
    }

    #[test]
    fn unknown_and_released_messages_release_nothing_more() {
        let mut gate = AckGate::new(2);
        gate.received(&[at(1)]);
        assert!(gate.durable(vec![at(9)]).is_empty());
        assert!(gate.durable(vec![at(1)]).is_empty());
        assert_eq!(entries(&gate.durable(vec![at(1)])), vec![1]);
        assert!(gate.durable(vec![at(1)]).is_empty(), "already released");
    }

    #[test]
    fn a_redelivered_message_is_owed_again_by_every_sink() {
        let mut gate = AckGate::new(2);
        gate.received(&[at(1), at(2), at(3)]);
        assert!(gate.durable(vec![at(1), at(2)]).is_empty());
        // The broker rewound to 2: both sinks get 2 and 3 again, so each is owed two more
        // reports, whichever copies they come from.
        gate.received(&[at(2), at(3)]);
        assert_eq!(entries(&gate.durable(vec![at(1)])), vec![1]);
        assert!(gate.durable(vec![at(2), at(3)]).is_empty());
        assert_eq!(entries(&gate.durable(vec![at(2), at(3)])), vec![2, 3]);
        assert_eq!(gate.pending(), 0);
        assert!(
            gate.durable(vec![at(2), at(3)]).is_empty(),
            "released already"
        );
    }

    #[test]
    fn partitions_are_counted_apart_and_released_in_the_order_given() {
        let on = |topic: &str, entry: u64| MessagePosition {
            topic: topic.into(),
            offset: (1, entry, -1),
            entry_size: None,
            origin: None,
        };
        let mut gate = AckGate::new(2);
        gate.received(&[on("a", 1), on("b", 1), on("a", 2), on("b", 2)]);
        assert!(gate
            .durable(vec![on("a", 1), on("b", 1), on("a", 2)])
            .is_empty());
        let released = gate.durable(vec![on("b", 1), on("a", 1), on("a", 2), on("b", 2)]);
        let names: Vec<(String, u64)> = released
            .iter()
            .map(|p| (p.topic.to_string(), p.offset.1))
            .collect();
        assert_eq!(
            names,
            vec![("b".into(), 1), ("a".into(), 1), ("a".into(), 2)]
        );
        assert_eq!(gate.pending(), 1);
    }
}
