//! [`SkippedEntries`] of one Pulsar subscription, read from the topic's internal stats.
//!
//! The broker's dispatcher acknowledges, in the subscription's cursor, the entries it filters
//! out instead of dispatching: server-only markers (replicated-subscription snapshots),
//! transaction commit/abort markers and aborted transactional messages; a message TTL moves
//! the cursor's mark-delete position past expired messages. The connector acknowledges a
//! message only once every sink holds it. So the entries strictly between two delivered
//! messages were skipped by the broker exactly when all of them are acknowledged in the
//! cursor: at or below `markDeletePosition`, or inside one of `individuallyDeletedMessages`'
//! ranges (open below, closed above: `(14:3..14:5]` is entries 4 and 5 of ledger 14).
//! Messages another consumer holds without having acknowledged them are not, so a gap they
//! leave is never taken as skipped.

use async_trait::async_trait;

use super::admin::{AdminError, PulsarAdmin};
use super::topic::stream_topic;
use crate::source::{Offset, SkippedEntries, SkippedEntriesError};

/// A position in the topic's ledgers: (ledger, entry), ordered as the broker orders them.
/// The entry may be -1 ("before the first entry of the ledger").
type Position = (i64, i64);

/// Why the cursor could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    /// The admin request failed.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The topic has no cursor of the subscription (yet).
    #[error("the topic has no cursor of subscription `{0}`")]
    NoCursor(String),
    /// A field of the cursor is missing or not in the form expected.
    #[error("cursor of `{subscription}`: cannot read {field} `{text}`")]
    Malformed {
        /// The subscription.
        subscription: String,
        /// The field.
        field: &'static str,
        /// What it held (truncated).
        text: String,
    },
}

/// What a subscription's cursor says is acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorAcks {
    /// Everything at or below this is acknowledged.
    pub mark_delete: Position,
    /// Acknowledged ranges `(lower, upper]`, ascending.
    pub ranges: Vec<(Position, Position)>,
    /// The topic's ledgers with their entry counts (0 for the open one), ascending.
    pub ledgers: Vec<(i64, i64)>,
}

impl CursorAcks {
    /// Reads `cursors.<subscription>` of a topic's internal stats.
    pub fn from_internal_stats(
        stats: &serde_json::Value,
        subscription: &str,
    ) -> Result<Self, CursorError> {
        let cursor = stats
            .get("cursors")
            .and_then(|cursors| cursors.get(subscription))
            .ok_or_else(|| CursorError::NoCursor(subscription.to_string()))?;
        let malformed = |field: &'static str, text: &str| CursorError::Malformed {
            subscription: subscription.to_string(),
            field,
            text: text.chars().take(200).collect(),
        };
        let field = |name: &'static str| {
            cursor
                .get(name)
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| malformed(name, &cursor.to_string()))
        };
        let mark_delete = field("markDeletePosition")?;
        let ranges_text = field("individuallyDeletedMessages")?;
        let mut ranges = parse_ranges(ranges_text)
            .ok_or_else(|| malformed("individuallyDeletedMessages", ranges_text))?;
        ranges.sort_unstable();
        let mut ledgers: Vec<(i64, i64)> = stats
            .get("ledgers")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|ledger| {
                let number = |name| ledger.get(name).and_then(serde_json::Value::as_i64);
                Some((number("ledgerId")?, number("entries").unwrap_or(0)))
            })
            .collect();
        ledgers.sort_unstable();
        Ok(Self {
            mark_delete: parse_position(mark_delete)
                .ok_or_else(|| malformed("markDeletePosition", mark_delete))?,
            ranges,
            ledgers,
        })
    }

    /// Whether every entry before `first` is acknowledged. The entry before the first of a
    /// ledger is the last of the newest earlier ledger holding entries; with none left (the
    /// broker deletes a ledger once every cursor is past it), nothing before is unacknowledged.
    pub fn covers_before(&self, first: Position) -> bool {
        let target = if first.1 > 0 {
            (first.0, first.1 - 1)
        } else {
            match self
                .ledgers
                .iter()
                .rev()
                .find(|&&(ledger, entries)| ledger < first.0 && entries > 0)
            {
                Some(&(ledger, entries)) => (ledger, entries - 1),
                None => return true,
            }
        };
        self.reaches(self.mark_delete, target)
    }

    /// Whether every entry strictly between entry `after` and entry `before` is
    /// acknowledged. Positions in different ledgers are compared as the broker orders them;
    /// the acknowledged set must then reach from `after` to the entry before `before`
    /// without a break (the broker's ranges span ledgers only where they are contiguous).
    pub fn covers(&self, after: Position, before: Position) -> bool {
        // The last position that must be acknowledged: the one before `before` (entry -1 of
        // a ledger stands before its first entry, as in the broker's mark-delete positions).
        let target = (before.0, before.1 - 1);
        if target <= after {
            return true;
        }
        self.reaches(after.max(self.mark_delete), target)
    }

    /// Whether the acknowledged intervals reach `target` without a break from `reached`
    /// (which need not be acknowledged itself: its message is the caller's).
    fn reaches(&self, mut reached: Position, target: Position) -> bool {
        for &(lower, upper) in &self.ranges {
            if reached >= target {
                break;
            }
            if lower <= reached && upper > reached {
                reached = upper;
            }
        }
        reached >= target
    }
}

/// `ledger:entry` (either may be -1).
fn parse_position(text: &str) -> Option<Position> {
    let (ledger, entry) = text.trim().split_once(':')?;
    Some((ledger.trim().parse().ok()?, entry.trim().parse().ok()?))
}

/// `[(14:3..14:5],(14:7..14:9]]` (with or without spaces after the commas); `[]` when none.
fn parse_ranges(text: &str) -> Option<Vec<(Position, Position)>> {
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
    let mut ranges = Vec::new();
    for part in inner.split(']') {
        let part = part.trim_start_matches([',', ' ']).trim();
        if part.is_empty() {
            continue;
        }
        let (lower, upper) = part.strip_prefix('(')?.split_once("..")?;
        ranges.push((parse_position(lower)?, parse_position(upper)?));
    }
    Some(ranges)
}

/// The entry of an offset as a broker position (`None` past `i64`).
fn entry_position(offset: Offset) -> Option<Position> {
    Some((i64::try_from(offset.0).ok()?, i64::try_from(offset.1).ok()?))
}

/// What the broker skipped for one durable subscription.
#[derive(Debug, Clone)]
pub struct PulsarSkippedEntries {
    admin: PulsarAdmin,
    subscription: String,
}

impl PulsarSkippedEntries {
    /// Reads the cursor of `subscription` through `admin`.
    pub fn new(admin: PulsarAdmin, subscription: impl Into<String>) -> Self {
        Self {
            admin,
            subscription: subscription.into(),
        }
    }

    /// The cursor's acknowledgements on `stream` (a topic or partition, named as a
    /// source names its streams: `<cluster>/<partition>` in a replicated namespace).
    pub async fn cursor(&self, stream: &str) -> Result<CursorAcks, CursorError> {
        let stats = self.admin.internal_stats(stream_topic(stream)).await?;
        CursorAcks::from_internal_stats(&stats, &self.subscription)
    }

    /// [`Self::cursor`], failing as the source's answers fail.
    async fn stream_cursor(&self, stream: &str) -> Result<CursorAcks, SkippedEntriesError> {
        self.cursor(stream).await.map_err(|e| SkippedEntriesError {
            stream: stream.to_string(),
            source: Box::new(e),
        })
    }
}

#[async_trait]
impl SkippedEntries for PulsarSkippedEntries {
    async fn skipped(
        &self,
        stream: &str,
        gaps: &[(Offset, Offset)],
    ) -> Result<Vec<bool>, SkippedEntriesError> {
        if gaps.is_empty() {
            return Ok(Vec::new());
        }
        let acks = self.stream_cursor(stream).await?;
        Ok(gaps
            .iter()
            .map(
                |&(after, before)| match (entry_position(after), entry_position(before)) {
                    (Some(after), Some(before)) => acks.covers(after, before),
                    _ => false,
                },
            )
            .collect())
    }

    async fn done_before(&self, stream: &str, first: Offset) -> Result<bool, SkippedEntriesError> {
        let acks = self.stream_cursor(stream).await?;
        Ok(entry_position(first).is_some_and(|first| acks.covers_before(first)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acks(mark_delete: &str, ranges: &str) -> CursorAcks {
        let stats = serde_json::json!({"cursors": {"sub": {
            "markDeletePosition": mark_delete,
            "individuallyDeletedMessages": ranges,
            "readPosition": "5:169",
        }}});
        CursorAcks::from_internal_stats(&stats, "sub").unwrap()
    }

    #[test]
    fn the_broker_format_is_read() {
        // As Pulsar 4.0.7 prints them.
        let read = acks("5:8", "[(5:11..5:14],(5:19..5:26],(5:162..5:168]]");
        assert_eq!(read.mark_delete, (5, 8));
        assert_eq!(
            read.ranges,
            vec![((5, 11), (5, 14)), ((5, 19), (5, 26)), ((5, 162), (5, 168))]
        );
        assert_eq!(acks("5:-1", "[]").mark_delete, (5, -1));
        assert!(acks("5:-1", "[]").ranges.is_empty());
        assert_eq!(
            acks("-1:-1", "[(14:3..14:5], (14:7..14:9]]").ranges.len(),
            2,
            "with spaces"
        );
    }

    #[test]
    fn a_malformed_or_missing_cursor_is_an_error() {
        let stats = |md: &str, ranges: &str| {
            serde_json::json!({"cursors": {"sub": {
                "markDeletePosition": md, "individuallyDeletedMessages": ranges}}})
        };
        for (md, ranges) in [
            ("5", "[]"),
            ("5:x", "[]"),
            ("5:1", "(5:1..5:2]"),
            ("5:1", "[(5:1..5:2"),
            ("5:1", "[(5:1-5:2]]"),
        ] {
            assert!(
                matches!(
                    CursorAcks::from_internal_stats(&stats(md, ranges), "sub"),
                    Err(CursorError::Malformed { .. })
                ),
                "{md} {ranges}"
            );
        }
        assert!(matches!(
            CursorAcks::from_internal_stats(&stats("5:1", "[]"), "other"),
            Err(CursorError::NoCursor(_))
        ));
        assert!(CursorAcks::from_internal_stats(&serde_json::json!({}), "sub").is_err());
    }

    #[test]
    fn same_ledger_gaps_need_every_entry_between_acknowledged() {
        let read = acks("5:8", "[(5:10..5:14],(5:19..5:26]]");
        assert!(read.covers((5, 4), (5, 6)), "5:5 under mark-delete");
        assert!(!read.covers((5, 8), (5, 10)), "5:9 is not acknowledged");
        assert!(read.covers((5, 10), (5, 15)), "11..14 in a range");
        assert!(read.covers((5, 12), (5, 15)));
        assert!(!read.covers((5, 9), (5, 15)), "5:10 is not acknowledged");
        assert!(!read.covers((5, 10), (5, 16)), "5:15 is not");
        assert!(!read.covers((5, 14), (5, 20)), "15..18 are not");
        assert!(read.covers((5, 19), (5, 27)));
        assert!(!read.covers((5, 18), (5, 27)), "5:19 is not");
        assert!(read.covers((5, 3), (5, 4)), "nothing between");
        // Adjacent ranges (the broker merges them, but either way) join.
        let split = acks("5:0", "[(5:0..5:3],(5:3..5:6]]");
        assert!(split.covers((5, 0), (5, 7)));
        let holed = acks("5:0", "[(5:0..5:3],(5:4..5:6]]");
        assert!(!holed.covers((5, 0), (5, 7)), "5:4 is missing");
    }

    #[test]
    fn gaps_across_ledgers_need_one_unbroken_acknowledged_stretch() {
        // Ledger 5 ended at 5:20; its last entries and ledger 6's first are markers.
        let spanning = acks("5:10", "[(5:17..6:1]]");
        assert!(spanning.covers((5, 17), (6, 2)));
        assert!(
            !spanning.covers((5, 16), (6, 2)),
            "5:17 is not acknowledged"
        );
        assert!(!spanning.covers((5, 17), (6, 3)), "6:2 is not");
        assert!(
            acks("6:4", "[]").covers((5, 17), (6, 5)),
            "mark-delete past it"
        );
        // Ranges that do not reach across the ledger boundary prove nothing.
        let apart = acks("5:10", "[(5:17..5:20],(6:-1..6:1]]");
        assert!(!apart.covers((5, 17), (6, 2)));
    }

    #[test]
    fn messages_expired_by_a_ttl_lie_under_the_mark_delete_position() {
        // The connector holds 5:9 uncommitted; a TTL expired 5:10..5:30 (never delivered) and
        // the expiry moved mark-delete to 5:30, past 5:9 too.
        let expired = acks("5:30", "[]");
        assert!(expired.covers((5, 9), (5, 31)));
        assert!(
            !expired.covers((5, 9), (5, 33)),
            "5:31, 5:32 are not expired"
        );
    }

    #[test]
    fn what_comes_before_a_first_message_is_acknowledged_or_not() {
        let stats = serde_json::json!({
            "ledgers": [{"ledgerId": 5, "entries": 21}, {"ledgerId": 7, "entries": 0},
                        {"ledgerId": 6, "entries": 0}],
            "cursors": {"sub": {"markDeletePosition": "5:9",
                                "individuallyDeletedMessages": "[(5:12..5:20]]"}}});
        let read = CursorAcks::from_internal_stats(&stats, "sub").unwrap();
        assert!(read.covers_before((5, 10)), "right after mark-delete");
        assert!(!read.covers_before((5, 11)), "5:10 is not acknowledged");
        assert!(!read.covers_before((5, 14)), "5:10, 5:11 are not");
        assert!(
            !read.covers_before((7, 0)),
            "5:10 is still owed before ledger 7"
        );
        let done = serde_json::json!({
            "ledgers": [{"ledgerId": 5, "entries": 21}, {"ledgerId": 6, "entries": 0},
                        {"ledgerId": 7, "entries": 0}],
            "cursors": {"sub": {"markDeletePosition": "5:20",
                                "individuallyDeletedMessages": "[]"}}});
        let done = CursorAcks::from_internal_stats(&done, "sub").unwrap();
        assert!(
            done.covers_before((7, 0)),
            "5:20 is ledger 5's last entry; ledger 6 is empty"
        );
        assert!(!done.covers_before((7, 1)), "7:0 is not acknowledged");
        let trimmed = CursorAcks::from_internal_stats(
            &serde_json::json!({"ledgers": [{"ledgerId": 9, "entries": 0}],
                "cursors": {"sub": {"markDeletePosition": "8:40",
                                    "individuallyDeletedMessages": "[]"}}}),
            "sub",
        )
        .unwrap();
        assert!(trimmed.covers_before((9, 0)), "earlier ledgers are deleted");
        assert!(!trimmed.covers_before((9, 2)));
    }

    #[test]
    fn offsets_are_entries_batch_indexes_aside() {
        assert_eq!(entry_position((5, 9, 3)), Some((5, 9)));
        assert_eq!(entry_position((u64::MAX, 0, -1)), None);
    }
}
