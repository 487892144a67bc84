//! Dead letters in the log: one line per pipeline, reason and writer schema version per
//! interval, with a count, never one line per message. A topic with a million bad messages
//! would otherwise write a million lines; the `dead_lettered_total` metric still counts
//! every message, and the dead-letter topic keeps each one with its reason.
//!
//! The first dead letter of a (reason, version) is logged at once with its message id and
//! detail, so an operator sees a new problem without delay; the ones after it are counted
//! and logged as one line when the interval ends (with the first of them as the example),
//! every interval while they keep coming.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::schema::DeadLetterReason;

/// How long dead letters of one reason and version are counted before their line.
pub const DEAD_LETTER_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What the log says about one (reason, writer schema version) of a pipeline.
type Key = (DeadLetterReason, Option<i64>);

/// Dead letters counted since a key's last line.
#[derive(Debug)]
struct Window {
    /// When the last line of this key was written.
    since: Instant,
    /// Dead letters since then.
    count: u64,
    /// The first of them: its message id and detail.
    example: Option<(String, String)>,
}

/// One lane's dead-letter log lines (the lane that publishes its pipeline's dead letters).
#[derive(Debug)]
pub struct DeadLetterLog {
    pipeline: String,
    interval: Duration,
    windows: HashMap<Key, Window>,
}

/// One dead letter as the log sees it.
pub struct Logged<'a> {
    /// Why it went there.
    pub reason: DeadLetterReason,
    /// The writer schema version of the message, when it carried one.
    pub schema_version: Option<i64>,
    /// The message id as the source names it.
    pub message_id: String,
    /// The human detail of the reason.
    pub detail: &'a str,
}

impl DeadLetterLog {
    /// A log for `pipeline` with one summary per key and `interval`.
    pub fn new(pipeline: &str, interval: Duration) -> Self {
        Self {
            pipeline: pipeline.to_string(),
            interval,
            windows: HashMap::new(),
        }
    }

    /// Counts one dead letter stored on the topic at `now`; logs it at once when it is the
    /// first of its reason and version in an interval.
    pub fn record(&mut self, now: Instant, letter: Logged<'_>) {
        let key = (letter.reason, letter.schema_version);
        match self.windows.get_mut(&key) {
            Some(window) => {
                window.count += 1;
                window
                    .example
                    .get_or_insert_with(|| (letter.message_id, letter.detail.to_string()));
            }
            None => {
                tracing::warn!(
                    pipeline = %self.pipeline,
                    reason = letter.reason.as_str(),
                    schema_version = ?letter.schema_version,
                    message_id = %letter.message_id,
                    detail = %letter.detail,
                    "message sent to the dead-letter topic; more of this reason and version are counted and logged once per {}",
                    humantime::format_duration(self.interval),
                );
                self.windows.insert(
                    key,
                    Window {
                        since: now,
                        count: 0,
                        example: None,
                    },
                );
            }
        }
    }

    /// Writes the line of each key whose interval ended by `now`; a key without dead letters
    /// in its interval is forgotten, so its next one is logged at once again.
    pub fn flush_due(&mut self, now: Instant) {
        let interval = self.interval;
        let pipeline = &self.pipeline;
        self.windows.retain(|key, window| {
            if now.duration_since(window.since) < interval {
                return true;
            }
            if window.count == 0 {
                return false;
            }
            summary(pipeline, key, window, now);
            *window = Window {
                since: now,
                count: 0,
                example: None,
            };
            true
        });
    }

    /// Writes what is still counted (shutdown).
    pub fn flush_all(&mut self, now: Instant) {
        for (key, window) in self.windows.drain() {
            if window.count > 0 {
                summary(&self.pipeline, &key, &window, now);
            }
        }
    }
}

fn summary(pipeline: &str, (reason, version): &Key, window: &Window, now: Instant) {
    let (first_id, first_detail) = window
        .example
        .as_ref()
        .map_or(("", ""), |(id, detail)| (id.as_str(), detail.as_str()));
    tracing::warn!(
        pipeline = %pipeline,
        reason = reason.as_str(),
        schema_version = ?version,
        count = window.count,
        seconds = now.duration_since(window.since).as_secs(),
        first_message_id = %first_id,
        detail = %first_detail,
        "messages sent to the dead-letter topic",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(reason: DeadLetterReason, version: Option<i64>, id: u32) -> Logged<'static> {
        Logged {
            reason,
            schema_version: version,
            message_id: format!("1:{id}:-1"),
            detail: "bad",
        }
    }

    fn counts(log: &DeadLetterLog) -> Vec<(Key, u64, Option<String>)> {
        let mut counts: Vec<_> = log
            .windows
            .iter()
            .map(|(key, w)| (*key, w.count, w.example.as_ref().map(|(id, _)| id.clone())))
            .collect();
        counts.sort_by_key(|(key, ..)| (key.0.as_str(), key.1));
        counts
    }

    #[test]
    fn the_first_of_a_key_opens_an_interval_and_later_ones_are_counted() {
        let start = Instant::now();
        let mut log = DeadLetterLog::new("p", Duration::from_secs(60));
        for id in 0..1000 {
            log.record(
                start,
                letter(DeadLetterReason::IncompatibleSchema, Some(3), id),
            );
        }
        log.record(start, letter(DeadLetterReason::Truncated, Some(3), 5000));
        log.record(
            start,
            letter(DeadLetterReason::IncompatibleSchema, Some(4), 6000),
        );
        let reason = DeadLetterReason::IncompatibleSchema;
        assert_eq!(
            counts(&log),
            vec![
                ((reason, Some(3)), 999, Some("1:1:-1".to_string())),
                ((reason, Some(4)), 0, None),
                ((DeadLetterReason::Truncated, Some(3)), 0, None),
            ]
        );
    }

    #[test]
    fn an_ended_interval_resets_its_count_and_a_quiet_key_is_forgotten() {
        let start = Instant::now();
        let mut log = DeadLetterLog::new("p", Duration::from_secs(60));
        let busy = (DeadLetterReason::Undecodable, None);
        let quiet = (DeadLetterReason::Truncated, None);
        log.record(start, letter(busy.0, busy.1, 1));
        log.record(start, letter(busy.0, busy.1, 2));
        log.record(start, letter(quiet.0, quiet.1, 3));
        log.flush_due(start + Duration::from_secs(59));
        assert_eq!(
            counts(&log).len(),
            2,
            "nothing is due before the interval ends"
        );
        log.flush_due(start + Duration::from_secs(60));
        assert_eq!(counts(&log), vec![(busy, 0, None)]);
        // The busy key keeps its window: its next dead letter is counted, not logged at once.
        log.record(start + Duration::from_secs(61), letter(busy.0, busy.1, 4));
        assert_eq!(counts(&log), vec![(busy, 1, Some("1:4:-1".to_string()))]);
        log.flush_all(start + Duration::from_secs(62));
        assert!(counts(&log).is_empty());
    }
}
