//! Where a message is in its source, as sinks and the offline table see it: a stream (one
//! topic partition) and an ordered offset. Sinks store, compare and hand back positions
//! without knowing which source made them; only the source turns them into its own ids.

use std::sync::Arc;

use serde::Deserialize;

/// Ordered coordinates of a message within its stream: segment, entry within the segment,
/// and index within the entry (-1 when the entry holds a single message). A new segment
/// starts at entry 0. For Pulsar: ledger, entry, index in the producer batch.
pub type Offset = (u64, u64, i32);

/// One message's place in its source: enough to acknowledge it later without keeping it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessagePosition {
    /// The stream (topic partition) it came from; shared by the positions of one stream
    /// (see [`StreamNames`]), since every message carries it through every sink.
    pub topic: Arc<str>,
    /// Its offset in the stream.
    pub offset: Offset,
    /// Messages in its entry, when the entry holds several (the source acknowledges whole
    /// entries).
    pub entry_size: Option<i32>,
    /// Where the message was first written, when the source replicated it from elsewhere
    /// (another cluster of a geo-replicated namespace); `None` for a message first written
    /// to the stream it came from.
    pub origin: Option<Arc<Origin>>,
}

/// Where a replicated copy was first written: its stream there and, when the source says,
/// its offset in that stream (the offline table records positions in that id space).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The origin stream, named as a source reading that cluster names it.
    pub stream: Arc<str>,
    /// The copy's offset in the origin stream.
    pub offset: Option<Offset>,
}

impl MessagePosition {
    /// Whether this is the last message of its entry: acknowledging it covers the entry.
    pub fn completes_entry(&self) -> bool {
        match (self.offset.2, self.entry_size) {
            (index, Some(size)) if index >= 0 => index + 1 >= size,
            _ => true,
        }
    }

    /// The offset that stands for "everything up to this message": a message that completes
    /// its entry stands for the whole entry ([`WHOLE_ENTRY`]), so that the next message is
    /// the next entry's first.
    pub fn run_key(&self) -> Offset {
        self.run_key_at(self.offset)
    }

    /// [`Self::run_key`] in another id space of the same message: `offset` is its offset
    /// there (a replicated copy's offset in its origin); its place in its entry is the same.
    pub fn run_key_at(&self, offset: Offset) -> Offset {
        let (segment, entry, index) = offset;
        if self.completes_entry() {
            (segment, entry, WHOLE_ENTRY)
        } else {
            (segment, entry, index)
        }
    }

    /// `segment:entry:index` (Pulsar's `ledger:entry:index`), as shown in logs and file
    /// metadata.
    pub fn display_id(&self) -> String {
        let (segment, entry, index) = self.offset;
        format!("{segment}:{entry}:{index}")
    }
}

/// The index a run key holds for a whole entry (see [`MessagePosition::run_key`]).
pub const WHOLE_ENTRY: i32 = i32::MAX;

/// Whether the message at `next` comes right after the run ending at `run_end` (a
/// [`MessagePosition::run_key`]) in its stream: the next index of the same entry, or the
/// first message of the next entry or of a newer segment.
pub fn continues_key(run_end: Offset, next: Offset) -> bool {
    let (segment, entry, index) = run_end;
    let (next_segment, next_entry, next_index) = next;
    if index == WHOLE_ENTRY || index < 0 {
        let first_of_entry = next_index <= 0;
        first_of_entry
            && ((next_segment == segment && next_entry == entry + 1)
                || (next_segment > segment && next_entry == 0))
    } else {
        next_segment == segment && next_entry == entry && next_index == index + 1
    }
}

/// Whether a gap lies between whole entries (the run ending at `run_end` ends with a
/// complete entry and `next` starts one): only then is it a run of missing entries the
/// source can vouch for ([`super::SkippedEntries`]).
pub fn between_entries(run_end: Offset, next: Offset) -> bool {
    (run_end.2 == WHOLE_ENTRY || run_end.2 < 0) && next.2 <= 0
}

/// Which messages' rows the offline table takes in a replicated namespace
/// (messages with an [`Origin`]); other sinks take every message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OfflineOrigins {
    /// Only messages first written to this sidecar's cluster; copies from other clusters go
    /// to the online store only (active/active: every region's sidecar commits its own).
    #[default]
    OwnRegion,
    /// Every message, a copy under its origin cluster's position (active/standby: the one
    /// running sidecar commits everything, skipping what another region committed).
    AllRegions,
}

/// Splits `positions` into runs of one stream each, in order. Batches are mostly one stream,
/// so code that looks a stream up per run instead of per message saves a string hash or
/// compare per message; positions of one stream share their name, so a pointer compare
/// usually decides.
pub fn stream_runs(positions: &[MessagePosition]) -> impl Iterator<Item = &[MessagePosition]> {
    positions.chunk_by(|a, b| same_stream(&a.topic, &b.topic))
}

/// The distinct streams of some position lists, in first-seen order.
pub fn distinct_streams<'a>(
    lists: impl IntoIterator<Item = &'a [MessagePosition]>,
) -> Vec<Arc<str>> {
    let mut names: Vec<Arc<str>> = Vec::new();
    for run in lists.into_iter().flat_map(stream_runs) {
        if !names.iter().any(|name| same_stream(name, &run[0].topic)) {
            names.push(run[0].topic.clone());
        }
    }
    names
}

/// Whether two stream names are the same stream (a pointer compare when they are shared).
pub fn same_stream(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// Hands out one shared name per stream, so that a message's position costs no allocation.
#[derive(Debug, Default)]
pub struct StreamNames {
    known: Vec<Arc<str>>,
}

impl StreamNames {
    /// The shared name of `topic` (a source reads a handful of partitions: a scan is enough).
    pub fn name(&mut self, topic: &str) -> Arc<str> {
        self.in_cluster(None, topic)
    }

    /// The shared name of `topic` in `cluster`: `<cluster>/<topic>`, or `topic` without one.
    pub fn in_cluster(&mut self, cluster: Option<&str>, topic: &str) -> Arc<str> {
        let matches = |known: &str| match cluster {
            None => known == topic,
            Some(cluster) => {
                known
                    .strip_prefix(cluster)
                    .and_then(|rest| rest.strip_prefix('/'))
                    == Some(topic)
            }
        };
        if let Some(known) = self.known.iter().find(|known| matches(known)) {
            return known.clone();
        }
        let name: Arc<str> = match cluster {
            None => Arc::from(topic),
            Some(cluster) => Arc::from(format!("{cluster}/{topic}")),
        };
        self.known.push(name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_complete_at_its_last_message() {
        let at = |index, size| MessagePosition {
            topic: "t".into(),
            offset: (1, 2, index),
            entry_size: size,
            origin: None,
        };
        assert!(at(-1, None).completes_entry());
        assert!(!at(0, Some(3)).completes_entry());
        assert!(at(2, Some(3)).completes_entry());
        assert_eq!(at(2, Some(3)).display_id(), "1:2:2");
    }

    #[test]
    fn one_name_per_stream() {
        let mut names = StreamNames::default();
        let a = names.name("t-partition-0");
        let b = names.name("t-partition-1");
        assert!(Arc::ptr_eq(&a, &names.name("t-partition-0")));
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.as_ref(), "t-partition-1");
    }
}
