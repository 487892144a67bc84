//! Which messages a lane may acknowledge when it feeds several sinks: only those every sink
//! has reported durable.

use rustc_hash::FxHashMap;

use crate::source::{MessagePosition, Offset};

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
    owed: FxHashMap<String, FxHashMap<Offset, usize>>,
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
        for run in positions.chunk_by(|a, b| a.topic == b.topic) {
            let topic = run[0].topic.as_str();
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
        positions
            .into_iter()
            .filter(|position| {
                let Some(partition) = self.owed.get_mut(position.topic.as_str()) else {
                    tracing::debug!(message_id = %position.display_id(), "a sink reported a message of a partition the lane does not wait for");
                    return false;
                };
                match partition.get_mut(&position.offset) {
                    Some(owed) if *owed > 1 => {
                        *owed -= 1;
                        false
                    }
                    Some(_) => {
                        partition.remove(&position.offset);
                        true
                    }
                    None => {
                        tracing::debug!(message_id = %position.display_id(), "a sink reported a message the lane does not wait for");
                        false
                    }
                }
            })
            .collect()
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
