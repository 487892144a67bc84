//! The rows of one rollover, with the messages behind them, and the rules that keep every
//! message in the table once.
//!
//! Per topic partition, a commit records its newest message as "everything up to here is in
//! the table". That is only true if the rollover holds, for each partition, an unbroken run of
//! messages continuing from what the table held. Pulsar does not always deliver one: when a
//! Failover subscription hands a partition to another consumer, the broker may first dispatch
//! newer messages (its read position ran ahead for the old consumer) and only then rewind to
//! the last acknowledged one and deliver everything from there again. So:
//!
//! - a message at or below the newest one taken for its partition is such a rewind: the
//!   buffered messages from it on are dropped (they come again, in order);
//! - a commit takes, per partition, only the unbroken run that continues from the table's
//!   position; messages after a gap stay buffered until the gap fills, the source says it
//!   skipped the gap's entries itself, or the gap is accepted as real (see
//!   [`Rollover::cuts`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::error::ArrowError;

use super::gaps::{walk, AcceptedGap};
use super::origins::{held_at_origin, origin_commit_keys, origin_streams};
use crate::delta::table::positions::commit_key;
use crate::delta::{message_key, CommittedPositions, MessageKey};
use crate::record::drop_rows;
use crate::source::{distinct_streams, stream_runs, MessagePosition};

/// One batch as buffered: table rows, and for each row the index of its message.
#[derive(Debug, Clone)]
struct Buffered {
    rows: RecordBatch,
    row_messages: Vec<usize>,
    /// Every message of the batch still buffered (with rows or not), in receive order.
    positions: Vec<MessagePosition>,
}

impl Buffered {
    /// Keeps the messages `keep` says and their rows.
    fn retain(&mut self, keep: &[bool]) -> Result<usize, ArrowError> {
        let mut new_index = vec![usize::MAX; keep.len()];
        let mut next = 0;
        for (index, kept) in keep.iter().enumerate() {
            if *kept {
                new_index[index] = next;
                next += 1;
            }
        }
        let row_keep: Vec<bool> = self.row_messages.iter().map(|&m| keep[m]).collect();
        let dropped_rows = row_keep.iter().filter(|k| !**k).count();
        if dropped_rows > 0 {
            self.rows = arrow::compute::filter_record_batch(
                &self.rows,
                &BooleanArray::from(row_keep.clone()),
            )?;
        }
        self.row_messages = self
            .row_messages
            .iter()
            .zip(&row_keep)
            .filter(|(_, k)| **k)
            .map(|(&m, _)| new_index[m])
            .collect();
        let mut flags = keep.iter();
        self.positions.retain(|_| *flags.next().unwrap_or(&false));
        Ok(dropped_rows)
    }

    /// Drops the rows of messages the table already holds (the messages stay, to be
    /// acknowledged); returns how many rows. Looks each partition up once per run.
    fn drop_held(&mut self, held: &CommittedPositions) -> Result<usize, ArrowError> {
        let mut keep_message = Vec::with_capacity(self.positions.len());
        for run in stream_runs(&self.positions) {
            let last = held.get(&run[0].topic);
            keep_message.extend(run.iter().map(|position| {
                last.is_none_or(|last| message_key(position) > last)
                    && !held_at_origin(position, held)
            }));
        }
        drop_rows(&mut self.rows, &mut self.row_messages, |m| {
            keep_message.get(m).copied().unwrap_or(true)
        })
    }
}

/// The rows waiting for the next commit.
#[derive(Debug, Default)]
pub struct Rollover {
    batches: Vec<Buffered>,
    newest: HashMap<String, MessageKey>,
    /// When the oldest buffered row arrived.
    pub opened_at: Option<Instant>,
    /// Since when each partition has had messages held back behind a gap.
    gap_since: HashMap<String, Instant>,
}

impl Rollover {
    /// Buffered rows.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.rows.num_rows()).sum()
    }

    /// In-memory size of the buffered rows.
    pub fn arrow_bytes(&self) -> usize {
        self.batches
            .iter()
            .map(|b| b.rows.get_array_memory_size())
            .sum()
    }

    /// Buffered messages.
    pub fn messages(&self) -> usize {
        self.batches.iter().map(|b| b.positions.len()).sum()
    }

    /// Every buffered message, in receive order.
    pub fn positions(&self) -> impl Iterator<Item = &MessagePosition> {
        self.batches.iter().flat_map(|b| b.positions.iter())
    }

    /// The buffered rows, batch by batch.
    pub fn row_batches(&self) -> Vec<RecordBatch> {
        self.batches.iter().map(|b| b.rows.clone()).collect()
    }

    /// Takes a batch's table rows (`row_messages[row]` indexes `positions`). A message at or
    /// below the newest taken for its partition means the broker rewound: what is buffered
    /// of that partition from there on is dropped first. Returns the rows so dropped.
    pub fn take(
        &mut self,
        rows: RecordBatch,
        row_messages: Vec<usize>,
        positions: Vec<MessagePosition>,
    ) -> Result<usize, ArrowError> {
        let mut rewound = 0;
        let mut incoming = Buffered {
            rows,
            row_messages,
            positions,
        };
        let mut index = self.advance_in_order(&incoming.positions);
        while index < incoming.positions.len() {
            let position = &incoming.positions[index];
            let key = message_key(position);
            match self.newest.get_mut(position.topic.as_ref()) {
                Some(newest) if key > *newest => *newest = key,
                None => {
                    self.newest.insert(position.topic.to_string(), key);
                }
                Some(_) => {
                    let topic = position.topic.clone();
                    // Everything of this partition from `key` on comes again.
                    let from = |p: &MessagePosition| p.topic == topic && message_key(p) >= key;
                    for batch in &mut self.batches {
                        let keep: Vec<bool> = batch.positions.iter().map(|p| !from(p)).collect();
                        rewound += batch.retain(&keep)?;
                    }
                    let keep: Vec<bool> = incoming
                        .positions
                        .iter()
                        .enumerate()
                        .map(|(i, p)| i >= index || !from(p))
                        .collect();
                    rewound += incoming.retain(&keep)?;
                    index = keep[..index].iter().filter(|k| **k).count();
                    self.newest.insert(topic.to_string(), key);
                }
            }
            index += 1;
        }
        self.batches.retain(|b| !b.positions.is_empty());
        if !incoming.positions.is_empty() {
            self.opened_at.get_or_insert_with(Instant::now);
            self.batches.push(incoming);
        }
        Ok(rewound)
    }

    /// Records the newest message of each partition for the leading runs of `positions` that
    /// continue past what was taken before (the usual case, checked with one lookup per run);
    /// returns where the first run that rewinds starts (`positions.len()` when none does).
    fn advance_in_order(&mut self, positions: &[MessagePosition]) -> usize {
        let mut done = 0;
        for run in stream_runs(positions) {
            let mut last = self.newest.get(run[0].topic.as_ref()).copied();
            let in_order = run.iter().all(|position| {
                let key = message_key(position);
                let ahead = last.is_none_or(|last| key > last);
                last = Some(key);
                ahead
            });
            if !in_order {
                break;
            }
            if let Some(last) = last {
                match self.newest.get_mut(run[0].topic.as_ref()) {
                    Some(newest) => *newest = last,
                    None => {
                        self.newest.insert(run[0].topic.to_string(), last);
                    }
                }
            }
            done += run.len();
        }
        done
    }

    /// Distinct partitions of the buffered messages.
    pub fn partitions(&self) -> Vec<Arc<str>> {
        distinct_streams(self.batches.iter().map(|b| b.positions.as_slice()))
    }

    /// Distinct origin streams of the buffered copies (see [`super::origins`]).
    pub fn origin_streams(&self) -> Vec<Arc<str>> {
        origin_streams(self.positions())
    }

    /// Per origin stream, the key a commit of this rollover records for its copies.
    pub fn origin_commit_keys(&self) -> BTreeMap<String, MessageKey> {
        origin_commit_keys(self.positions())
    }

    /// Drops the rows of messages the table already holds (their messages stay, to be
    /// acknowledged); returns how many.
    pub fn drop_held(&mut self, held: &CommittedPositions) -> Result<usize, ArrowError> {
        let mut dropped = 0;
        for batch in &mut self.batches {
            dropped += batch.drop_held(held)?;
        }
        Ok(dropped)
    }

    /// [`Rollover::drop_held`] for the batch taken last only: the earlier ones were checked
    /// when they came (and the commit checks all of them against the newest state).
    pub fn drop_held_in_newest(&mut self, held: &CommittedPositions) -> Result<usize, ArrowError> {
        match self.batches.last_mut() {
            Some(batch) => batch.drop_held(held),
            None => Ok(0),
        }
    }

    /// Every gap in the buffered messages of each partition, from what the table holds on
    /// (each as if the ones before it were bridged), in order.
    pub fn gaps(&self, held: &CommittedPositions) -> Vec<AcceptedGap> {
        let mut gaps = Vec::new();
        for (partition, positions) in by_partition(&self.batches) {
            walk(&positions, held.get(partition), |at, next| {
                gaps.push((partition.to_string(), at, next));
                true
            });
        }
        gaps
    }

    /// Per partition, the newest message a commit may take: the end of the unbroken run that
    /// continues from what the table holds, a gap in `bridged` counting as unbroken (the
    /// source skipped its entries itself, see [`super::bridge`]). A partition whose run has
    /// been broken for `grace` is taken whole (the missing messages are taken as gone, e.g.
    /// expired by a TTL), named in the returned list of accepted gaps.
    pub fn cuts(
        &mut self,
        held: &CommittedPositions,
        grace: std::time::Duration,
        bridged: &HashSet<AcceptedGap>,
    ) -> (HashMap<String, MessageKey>, Vec<AcceptedGap>) {
        let mut cuts = HashMap::new();
        let mut accepted = Vec::new();
        let mut gapped = Vec::new();
        for (partition, positions) in by_partition(&self.batches) {
            let (last, broken_at) = walk(&positions, held.get(partition), |at, next| {
                bridged.contains(&(partition.to_string(), at, next))
            });
            match (broken_at, last) {
                (Some((at, next)), _) => {
                    let since = *self
                        .gap_since
                        .entry(partition.to_string())
                        .or_insert_with(Instant::now);
                    if since.elapsed() >= grace {
                        accepted.push((partition.to_string(), at, next));
                        cuts.insert(partition.to_string(), (u64::MAX, u64::MAX, i32::MAX));
                    } else {
                        gapped.push(partition.to_string());
                        if let Some(l) = last {
                            cuts.insert(partition.to_string(), l);
                        }
                    }
                }
                (None, Some(l)) => {
                    cuts.insert(partition.to_string(), l);
                }
                (None, None) => {}
            }
        }
        self.gap_since.retain(|p, _| gapped.contains(p));
        (cuts, accepted)
    }

    /// Splits off (and returns) what a commit up to `cuts` takes: messages at or below their
    /// partition's cut, with their rows. What stays is the part after gaps.
    pub fn split(&mut self, cuts: &HashMap<String, MessageKey>) -> Result<Rollover, ArrowError> {
        let mut taken = Rollover::default();
        let mut kept = Vec::new();
        for mut batch in std::mem::take(&mut self.batches) {
            let mut within = Vec::with_capacity(batch.positions.len());
            for run in stream_runs(&batch.positions) {
                let cut = cuts.get(run[0].topic.as_ref());
                within.extend(
                    run.iter()
                        .map(|p| cut.is_some_and(|cut| message_key(p) <= *cut)),
                );
            }
            if within.iter().all(|w| *w) {
                taken.batches.push(batch);
                continue;
            }
            let mut rest = batch.clone();
            batch.retain(&within)?;
            let outside: Vec<bool> = within.iter().map(|w| !w).collect();
            rest.retain(&outside)?;
            if !batch.positions.is_empty() {
                taken.batches.push(batch);
            }
            kept.push(rest);
        }
        self.batches = kept;
        taken.opened_at = self.opened_at;
        if self.batches.is_empty() {
            self.opened_at = None;
        }
        Ok(taken)
    }

    /// Per topic partition, the key a commit of this rollover records (its newest message,
    /// standing for its whole entry when it completes it).
    pub fn commit_keys(&self) -> BTreeMap<String, MessageKey> {
        let mut keys: BTreeMap<&str, MessageKey> = BTreeMap::new();
        for run in self.batches.iter().flat_map(|b| stream_runs(&b.positions)) {
            let Some(key) = run.iter().map(commit_key).max() else {
                continue;
            };
            let entry = keys.entry(run[0].topic.as_ref()).or_insert(key);
            *entry = (*entry).max(key);
        }
        keys.into_iter()
            .map(|(topic, key)| (topic.to_string(), key))
            .collect()
    }

    /// Per topic partition, `[first, last]` message id, as JSON (file metadata).
    pub fn ranges_json(&self) -> String {
        let mut ranges: BTreeMap<&str, (&MessagePosition, &MessagePosition)> = BTreeMap::new();
        for run in self.batches.iter().flat_map(|b| stream_runs(&b.positions)) {
            let (first, last) = (&run[0], &run[run.len() - 1]);
            ranges
                .entry(first.topic.as_ref())
                .and_modify(|r| r.1 = last)
                .or_insert((first, last));
        }
        let ids: BTreeMap<&str, (String, String)> = ranges
            .into_iter()
            .map(|(topic, (first, last))| (topic, (first.display_id(), last.display_id())))
            .collect();
        serde_json::to_string(&ids).unwrap_or_default()
    }

    /// Puts back what [`Rollover::split`] took (its commit did not land).
    pub fn put_back(&mut self, taken: Rollover) {
        let mut batches = taken.batches;
        batches.append(&mut self.batches);
        self.batches = batches;
        self.opened_at = match (taken.opened_at, self.opened_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Every buffered message, to be acknowledged.
    pub fn into_positions(self) -> Vec<MessagePosition> {
        self.batches.into_iter().flat_map(|b| b.positions).collect()
    }
}

/// Per partition, the buffered messages in order.
fn by_partition(batches: &[Buffered]) -> BTreeMap<&str, Vec<&MessagePosition>> {
    let mut by_partition: BTreeMap<&str, Vec<&MessagePosition>> = BTreeMap::new();
    for run in batches.iter().flat_map(|b| stream_runs(&b.positions)) {
        by_partition
            .entry(run[0].topic.as_ref())
            .or_default()
            .extend(run.iter());
    }
    by_partition
}
