//! Which messages a lane may acknowledge when it feeds several sinks: only those every sink
//! has reported durable.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::source::{same_stream, stream_runs, MessagePosition, Offset};

/// Counts, per received message, the sinks that have not made it durable yet.
///
/// Each sink reports each message durable once, in the order it received them (per topic
/// partition), so what the gate releases keeps that order and cumulative acknowledgement
/// stays safe. With one sink the gate passes everything through untouched.
///
/// This runs for every message: counts are kept per partition by offset, so that a message
/// costs a hash of three integers and no allocation.
#[derive(Debug)]
pub struct AckGate {
    sinks: usize,
    owed: FxHashMap<String, OwedInPartition>,
}

/// Per message of one partition, the sinks that do not have it durable yet.
type OwedInPartition = FxHashMap<Offset, usize>;

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
                self.owed.insert(topic.to_string(), FxHashMap::default());
            }
            if let Some(owed) = self.owed.get_mut(topic) {
                owed.extend(run.iter().map(|position| (position.offset, self.sinks)));
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
        // once per run.
        let mut run: Option<(Arc<str>, Option<&mut OwedInPartition>)> = None;
        for position in positions {
            if !run
                .as_ref()
                .is_some_and(|(topic, _)| same_stream(topic, &position.topic))
            {
                let owed = self.owed.get_mut(position.topic.as_ref());
                run = Some((position.topic.clone(), owed));
            }
            let Some((_, Some(partition))) = run.as_mut() else {
                tracing::debug!(message_id = %position.display_id(), "a sink reported a message of a partition the lane does not wait for");
                continue;
            };
            match partition.get_mut(&position.offset) {
                Some(owed) if *owed > 1 => *owed -= 1,
                Some(_) => {
                    partition.remove(&position.offset);
                    released.push(position);
                }
                None => {
                    tracing::debug!(message_id = %position.display_id(), "a sink reported a message the lane does not wait for");
                }
            }
        }
        released
    }

    /// Messages some sink does not have durable yet.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.owed.values().map(FxHashMap::len).sum()
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
}
