//! Applying each stream's messages in order, for a sink that records per stream only the
//! newest position it applied (the aggregations' tiles: a message at or below it counts as
//! applied already, so one applied before an earlier one would make that one look applied).
//!
//! Such a sink may apply a message only once every earlier message of its stream is applied:
//! by itself (an unbroken run it applied) or by whoever acknowledged it (a message is
//! acknowledged only once every sink of the replica that had it holds it), or skipped by the
//! source. Pulsar does not always deliver such runs: when a Failover subscription hands a
//! partition over, the broker may first dispatch newer messages (its read position ran ahead
//! for the old consumer) and only then rewind to the last acknowledged message. So
//! [`InOrder`] holds back every message after a gap, and the first message of a stream, until
//! the source says the entries before it are done ([`SkippedEntries`]); a message at or below
//! a held one is such a rewind, and the held messages from it on are dropped (they come again).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::position::{between_entries, continues_key, stream_runs, MessagePosition, Offset};
use super::skipped::SkippedEntries;

/// How long a "not done" answer stands before the source is asked about the same stream again.
const ASK_AGAIN_AFTER: Duration = Duration::from_millis(500);

/// How long a stream's messages may wait behind a gap before an operator is told (and then
/// again every as long while they still wait): a hand-over fills its gap within seconds.
const WARN_AFTER: Duration = Duration::from_secs(60);

/// Per stream, what is known applied and what waits behind a gap.
pub struct InOrder<T> {
    streams: FxHashMap<Arc<str>, StreamRun<T>>,
    probe: Option<Arc<dyn SkippedEntries>>,
    /// Messages held behind a gap after an applied run (not a stream's first messages),
    /// since [`InOrder::take_gap_holds`] was last called.
    gap_holds: u64,
}

/// One stream's state.
struct StreamRun<T> {
    /// Every message up to this run key ([`MessagePosition::run_key`]) is applied or done;
    /// `None` until the first message is admitted.
    through: Option<Offset>,
    /// Messages waiting for the gap before them, in receive order.
    held: VecDeque<(MessagePosition, Payload<T>)>,
    /// When the source last said the entries before the first held message are not done.
    refused_at: Option<Instant>,
    /// Since when messages have been held without a break, and when that was last logged.
    held_since: Option<(Instant, Instant)>,
}

/// What is kept of a held message.
enum Payload<T> {
    /// Being admitted: the index of the message in its batch, until [`InOrder::admit`] fills
    /// it in.
    Pending(usize),
    /// Kept until the message is released.
    Kept(T),
}

impl<T> Default for StreamRun<T> {
    fn default() -> Self {
        StreamRun {
            through: None,
            held: VecDeque::new(),
            refused_at: None,
            held_since: None,
        }
    }
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder {
            streams: FxHashMap::default(),
            probe: None,
            gap_holds: 0,
        }
    }
}

impl<T> std::fmt::Debug for InOrder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InOrder")
            .field("streams", &self.streams.len())
            .field("held", &self.held())
            .field("probe", &self.probe.is_some())
            .finish()
    }
}

impl<T> InOrder<T> {
    /// Messages held back.
    pub fn held(&self) -> usize {
        self.streams.values().map(|s| s.held.len()).sum()
    }
}

impl<T: Default> InOrder<T> {
    /// Asks `probe` which entries are done. Without one, every message is applied as it
    /// comes (nothing can tell a gap that fills from one that does not).
    pub fn set_probe(&mut self, probe: Arc<dyn SkippedEntries>) {
        self.probe = Some(probe);
    }

    /// How many messages were held behind a gap after an applied run (a stream's first
    /// messages aside) since the last call.
    pub fn take_gap_holds(&mut self) -> u64 {
        std::mem::take(&mut self.gap_holds)
    }

    /// Decides, for each message of a batch (in receive order), whether it may be applied
    /// now. `payloads` gets the decisions and returns what to keep of each held message, by
    /// its index in the batch (a message left out keeps the default: it has nothing to apply
    /// but is still released in its turn).
    pub fn admit(
        &mut self,
        positions: &[MessagePosition],
        payloads: impl FnOnce(&[bool]) -> FxHashMap<usize, T>,
    ) -> Vec<bool> {
        if self.probe.is_none() {
            return vec![true; positions.len()];
        }
        let mut ready = Vec::with_capacity(positions.len());
        let mut holding = false;
        // Looked up once per run of one stream: batches mostly hold one.
        for messages in stream_runs(positions) {
            let run = self.streams.entry(messages[0].topic.clone()).or_default();
            for position in messages {
                let index = ready.len();
                let now = run.admit(position);
                if !now {
                    holding = true;
                    self.gap_holds += u64::from(run.through.is_some());
                    run.held
                        .push_back((position.clone(), Payload::Pending(index)));
                }
                ready.push(now);
            }
        }
        if !holding {
            return ready;
        }
        let mut kept = payloads(&ready);
        for run in self.streams.values_mut() {
            for (_, payload) in run.held.iter_mut() {
                if let Payload::Pending(index) = *payload {
                    *payload = Payload::Kept(kept.remove(&index).unwrap_or_default());
                }
            }
        }
        ready
    }

    /// Asks the source about the streams whose held messages wait on a gap (each at most
    /// once every half second while the answer is no) and returns the messages that
    /// may now be applied, in receive order per stream. An unanswered question is asked
    /// again later.
    pub async fn release(&mut self) -> Vec<(MessagePosition, T)> {
        let Some(probe) = self.probe.clone() else {
            return Vec::new();
        };
        let mut released = Vec::new();
        for (stream, run) in &mut self.streams {
            if run.held.is_empty()
                || run
                    .refused_at
                    .is_some_and(|t| t.elapsed() < ASK_AGAIN_AFTER)
            {
                continue;
            }
            while let Some((first, _)) = run.held.front() {
                let first = first.offset;
                let answer = match run.through {
                    None => probe.done_before(stream, first).await,
                    Some(through) if between_entries(through, first) => probe
                        .skipped(stream, &[(through, first)])
                        .await
                        .map(|answers| answers.first().copied().unwrap_or(false)),
                    // Part of an entry is missing: only its redelivery fills that.
                    Some(_) => Ok(false),
                };
                match answer {
                    Ok(true) => {
                        run.refused_at = None;
                        released.extend(run.release_run());
                    }
                    Ok(false) => {
                        run.refused_at = Some(Instant::now());
                        run.warn_if_long(stream, "the entries before them are not acknowledged");
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(stream = %stream, error = %e, "cannot tell whether a gap is done; asking again");
                        run.refused_at = Some(Instant::now());
                        run.warn_if_long(stream, &e.to_string());
                        break;
                    }
                }
            }
        }
        released
    }
}

impl<T> StreamRun<T> {
    /// Tells the operator, at most every [`WARN_AFTER`], that messages have waited that long.
    fn warn_if_long(&mut self, stream: &str, why: &str) {
        let now = Instant::now();
        let (since, logged) = *self.held_since.get_or_insert((now, now));
        if now.duration_since(since) >= WARN_AFTER && now.duration_since(logged) >= WARN_AFTER {
            self.held_since = Some((since, now));
            tracing::warn!(
                stream,
                held = self.held.len(),
                waited_s = now.duration_since(since).as_secs(),
                why,
                "messages wait behind a gap in their stream and are neither applied nor acknowledged"
            );
        }
    }

    /// Whether the message at `position` may be applied now (recording it as applied).
    fn admit(&mut self, position: &MessagePosition) -> bool {
        let offset = position.offset;
        if self
            .held
            .back()
            .is_some_and(|(newest, _)| offset <= newest.offset)
        {
            // The source went back: what is held from here on comes again, in order.
            let keep = self.held.partition_point(|(held, _)| held.offset < offset);
            self.held.truncate(keep);
        }
        if self.through.is_some_and(|through| offset <= through) {
            // Everything up to `through` is applied: this one too (a redelivery).
            return true;
        }
        if !self.held.is_empty() {
            return false;
        }
        match self.through {
            Some(through) if continues_key(through, offset) => {
                self.through = Some(position.run_key());
                true
            }
            _ => {
                // A new first held message: a new question for the source, a new wait.
                self.refused_at = None;
                self.held_since = None;
                false
            }
        }
    }

    /// The first held message (the source said the entries before it are done) and the held
    /// messages that follow it without a gap.
    fn release_run(&mut self) -> Vec<(MessagePosition, T)> {
        let mut released = Vec::new();
        let mut first = true;
        while let Some((position, _)) = self.held.front() {
            if !first
                && !self
                    .through
                    .is_some_and(|t| continues_key(t, position.offset))
            {
                break;
            }
            first = false;
            let Some((position, payload)) = self.held.pop_front() else {
                break;
            };
            self.through = Some(position.run_key());
            if let Payload::Kept(payload) = payload {
                released.push((position, payload));
            }
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::source::{SkippedEntriesError, WHOLE_ENTRY};

    /// A source whose subscription has every entry below `done` acknowledged.
    #[derive(Default)]
    struct Cursor {
        done: Mutex<u64>,
        asked: Mutex<usize>,
    }

    impl Cursor {
        fn acknowledge_below(&self, entry: u64) {
            *self.done.lock().unwrap() = entry;
        }
        fn asked(&self) -> usize {
            *self.asked.lock().unwrap()
        }
    }

    #[async_trait]
    impl SkippedEntries for Cursor {
        async fn skipped(
            &self,
            _stream: &str,
            gaps: &[(Offset, Offset)],
        ) -> Result<Vec<bool>, SkippedEntriesError> {
            *self.asked.lock().unwrap() += 1;
            let done = *self.done.lock().unwrap();
            Ok(gaps.iter().map(|(_, before)| before.1 <= done).collect())
        }
        async fn done_before(&self, _: &str, first: Offset) -> Result<bool, SkippedEntriesError> {
            *self.asked.lock().unwrap() += 1;
            Ok(first.1 <= *self.done.lock().unwrap())
        }
    }

    fn at(stream: &str, entries: std::ops::RangeInclusive<u64>) -> Vec<MessagePosition> {
        entries
            .map(|entry| MessagePosition {
                topic: stream.into(),
                offset: (7, entry, -1),
                entry_size: None,
                origin: None,
            })
            .collect()
    }

    /// Admits `positions` keeping each held message's entry; returns the entries ready now.
    fn admit(order: &mut InOrder<u64>, positions: &[MessagePosition]) -> Vec<u64> {
        let ready = order.admit(positions, |ready| {
            (0..positions.len())
                .filter(|&i| !ready[i])
                .map(|i| (i, positions[i].offset.1))
                .collect()
        });
        positions
            .iter()
            .zip(ready)
            .filter(|(_, ready)| *ready)
            .map(|(p, _)| p.offset.1)
            .collect()
    }

    fn entries(released: Vec<(MessagePosition, u64)>) -> Vec<u64> {
        released
            .into_iter()
            .map(|(p, kept)| {
                assert_eq!(p.offset.1, kept, "the payload kept for the message");
                kept
            })
            .collect()
    }

    #[tokio::test]
    async fn a_first_message_waits_until_what_precedes_it_is_done() {
        let cursor = Arc::new(Cursor::default());
        cursor.acknowledge_below(10);
        let mut order = InOrder::default();
        order.set_probe(cursor.clone());
        assert!(admit(&mut order, &at("p", 10..=12)).is_empty());
        assert_eq!(entries(order.release().await), vec![10, 11, 12]);
        // An unbroken run goes straight through, without asking.
        let asked = cursor.asked();
        assert_eq!(admit(&mut order, &at("p", 13..=14)), vec![13, 14]);
        assert!(order.release().await.is_empty());
        assert_eq!(cursor.asked(), asked);
    }

    #[tokio::test]
    async fn a_hand_over_that_runs_ahead_is_held_and_the_rewind_applied_in_order() {
        // Entries 0..=9 are acknowledged; another consumer still holds 10..=19 when this one
        // is first given 20..=24, then the broker rewinds to 10.
        let cursor = Arc::new(Cursor::default());
        cursor.acknowledge_below(10);
        let mut order = InOrder::default();
        order.set_probe(cursor.clone());
        assert!(admit(&mut order, &at("p", 20..=24)).is_empty());
        assert!(order.release().await.is_empty(), "10..=19 are not done");
        assert_eq!(order.held(), 5);
        assert_eq!(order.take_gap_holds(), 0, "a stream's first messages");
        assert!(
            admit(&mut order, &at("p", 25..=26)).is_empty(),
            "behind the gap"
        );
        // The rewind: the held messages from 10 on come again, so they are dropped.
        assert!(admit(&mut order, &at("p", 10..=12)).is_empty());
        assert_eq!(order.held(), 3);
        assert_eq!(entries(order.release().await), vec![10, 11, 12]);
        assert_eq!(
            admit(&mut order, &at("p", 13..=26)),
            (13..=26).collect::<Vec<_>>()
        );
        // A later redelivery of what is applied passes (the sink's positions tell it apart).
        assert_eq!(admit(&mut order, &at("p", 20..=21)), vec![20, 21]);
        assert_eq!(order.held(), 0);
    }

    #[tokio::test]
    async fn a_gap_another_consumer_acknowledges_releases_what_waited_behind_it() {
        let cursor = Arc::new(Cursor::default());
        cursor.acknowledge_below(5);
        let mut order = InOrder::default();
        order.set_probe(cursor.clone());
        admit(&mut order, &at("p", 5..=6));
        assert_eq!(entries(order.release().await), vec![5, 6]);
        assert!(
            admit(&mut order, &at("p", 9..=10)).is_empty(),
            "7, 8 missing"
        );
        assert_eq!(order.take_gap_holds(), 2);
        assert_eq!(order.take_gap_holds(), 0);
        assert!(order.release().await.is_empty());
        let asked = cursor.asked();
        assert!(order.release().await.is_empty());
        assert_eq!(cursor.asked(), asked, "a refusal stands for a while");
        cursor.acknowledge_below(9);
        tokio::time::sleep(ASK_AGAIN_AFTER).await;
        assert_eq!(entries(order.release().await), vec![9, 10]);
        assert_eq!(admit(&mut order, &at("p", 11..=11)), vec![11]);
    }

    #[tokio::test]
    async fn streams_wait_apart_and_a_batch_mixes_them() {
        let cursor = Arc::new(Cursor::default());
        let mut order = InOrder::default();
        order.set_probe(cursor.clone());
        let mut batch = at("a", 0..=1);
        batch.extend(at("b", 3..=4));
        assert!(admit(&mut order, &batch).is_empty());
        assert_eq!(
            entries(order.release().await),
            vec![0, 1],
            "b waits for 0..=2"
        );
        let mut next = at("a", 2..=2);
        next.extend(at("b", 5..=5));
        assert_eq!(admit(&mut order, &next), vec![2]);
        assert_eq!(order.held(), 3);
    }

    #[tokio::test]
    async fn without_a_probe_everything_is_applied_as_it_comes() {
        let mut order: InOrder<u64> = InOrder::default();
        assert_eq!(admit(&mut order, &at("p", 20..=21)), vec![20, 21]);
        assert_eq!(admit(&mut order, &at("p", 10..=10)), vec![10]);
        assert!(order.release().await.is_empty());
    }

    #[test]
    fn a_wait_emptied_by_a_rewind_does_not_count_towards_the_next_one() {
        let mut run: StreamRun<()> = StreamRun::default();
        let message = |entry| MessagePosition {
            topic: "p".into(),
            offset: (7, entry, -1),
            entry_size: None,
            origin: None,
        };
        assert!(!run.admit(&message(20)));
        run.held.push_back((message(20), Payload::Kept(())));
        let long_ago = Instant::now() - WARN_AFTER;
        run.held_since = Some((long_ago, long_ago));
        // The rewind drops what was held; the first message after it starts a new wait.
        assert!(!run.admit(&message(10)));
        assert!(run.held.is_empty());
        assert_eq!(run.held_since, None);
    }

    #[test]
    fn producer_batches_continue_index_by_index() {
        let mut run: StreamRun<()> = StreamRun {
            through: Some((7, 3, WHOLE_ENTRY)),
            ..StreamRun::default()
        };
        let message = |entry, index, size| MessagePosition {
            topic: "p".into(),
            offset: (7, entry, index),
            entry_size: Some(size),
            origin: None,
        };
        assert!(run.admit(&message(4, 0, 2)));
        assert!(!run.admit(&message(5, 0, 2)), "4:1 is missing");
        let mut run: StreamRun<()> = StreamRun {
            through: Some((7, 3, WHOLE_ENTRY)),
            ..StreamRun::default()
        };
        assert!(run.admit(&message(4, 0, 2)));
        assert!(run.admit(&message(4, 1, 2)));
        assert!(run.admit(&message(5, 0, 1)));
        assert_eq!(run.through, Some((7, 5, WHOLE_ENTRY)));
    }
}
