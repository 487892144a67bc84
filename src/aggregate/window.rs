//! A window's length and its hop, and which event times a read at time `t` covers.
//!
//! Windows are sawtooth-shaped, as Chronon's are: the head is the tile holding `t`, the tail
//! is aligned down to the hop, so a read at `t` of a window of length `W` and hop `h` covers
//! event times in `[floor((t − W) / h) · h, floor(t / h) · h + h)`. Compared with a window
//! sliding exactly over `(t − W, t]`, it holds at most one hop of older events at its tail,
//! and at its head the events of the current tile stamped after `t` (only events within the
//! allowed future skew can be). The hop grows with the window so that a window spans a
//! bounded number of tiles: 1 day from 12 days on, 1 hour from 12 hours on, else 5 minutes.

use std::fmt;

/// Milliseconds in a minute, an hour, a day.
const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The longest window accepted: a year of daily tiles.
pub const MAX_WINDOW_MS: i64 = 366 * DAY_MS;

/// A window length that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Shorter than the hop it would get (5 minutes).
    #[error("a window of {length} is shorter than its hop of {hop}; the shortest window is 5m")]
    ShorterThanHop {
        /// The window as written.
        length: String,
        /// The hop a window of that length gets.
        hop: String,
    },
    /// Not a whole number of hops: its tail could not be aligned.
    #[error("a window of {length} is not a whole number of its {hop} hops (e.g. {nearest})")]
    NotWholeHops {
        /// The window as written.
        length: String,
        /// The hop a window of that length gets.
        hop: String,
        /// The nearest length that is.
        nearest: String,
    },
    /// Longer than [`MAX_WINDOW_MS`].
    #[error("a window of {length} is longer than the longest accepted, 366d")]
    TooLong {
        /// The window as written.
        length: String,
    },
}

/// A window of an aggregation: its length and the hop its tail moves by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    length_ms: i64,
    hop_ms: i64,
}

impl Window {
    /// The window of `length_ms`, with the hop its length gets.
    pub fn new(length_ms: i64) -> Result<Window, WindowError> {
        let hop_ms = hop_for(length_ms);
        if length_ms > MAX_WINDOW_MS {
            return Err(WindowError::TooLong {
                length: duration_name(length_ms),
            });
        }
        if length_ms < hop_ms {
            return Err(WindowError::ShorterThanHop {
                length: duration_name(length_ms),
                hop: duration_name(hop_ms),
            });
        }
        if length_ms % hop_ms != 0 {
            let nearest = (length_ms + hop_ms / 2) / hop_ms * hop_ms;
            return Err(WindowError::NotWholeHops {
                length: duration_name(length_ms),
                hop: duration_name(hop_ms),
                nearest: duration_name(nearest.max(hop_ms)),
            });
        }
        Ok(Window { length_ms, hop_ms })
    }

    /// The window's length in milliseconds.
    pub fn length_ms(&self) -> i64 {
        self.length_ms
    }

    /// The hop (the tile length) in milliseconds.
    pub fn hop_ms(&self) -> i64 {
        self.hop_ms
    }

    /// The first event time a read at `t` covers: the tail aligned down to the hop.
    pub fn start_at(&self, t: i64) -> i64 {
        tile_start(t - self.length_ms, self.hop_ms)
    }

    /// The first event time after what a read at `t` covers: the end of the tile holding `t`.
    pub fn end_at(&self, t: i64) -> i64 {
        tile_start(t, self.hop_ms) + self.hop_ms
    }

    /// `true` when a read at `t` covers an event at `event_time`.
    pub fn covers(&self, t: i64, event_time: i64) -> bool {
        (self.start_at(t)..self.end_at(t)).contains(&event_time)
    }

    /// The suffix of the window's feature names: `1h`, `90m`, `30d`.
    pub fn suffix(&self) -> String {
        duration_name(self.length_ms)
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.suffix())
    }
}

/// The start of the tile of length `hop_ms` holding `t` (rounded towards the past, also
/// before 1970).
pub fn tile_start(t: i64, hop_ms: i64) -> i64 {
    t.div_euclid(hop_ms) * hop_ms
}

/// The hop a window of `length_ms` gets: 1 day from 12 days on, 1 hour from 12 hours on,
/// else 5 minutes (Chronon's choice, which keeps a window under 300 tiles).
pub fn hop_for(length_ms: i64) -> i64 {
    if length_ms >= 12 * DAY_MS {
        DAY_MS
    } else if length_ms >= 12 * HOUR_MS {
        HOUR_MS
    } else {
        5 * MINUTE_MS
    }
}

/// `length_ms` in the largest unit that divides it: `30d`, `36h`, `90m`, `1500ms`.
pub fn duration_name(length_ms: i64) -> String {
    for (unit, ms) in [("d", DAY_MS), ("h", HOUR_MS), ("m", MINUTE_MS), ("s", 1000)] {
        if length_ms != 0 && length_ms % ms == 0 {
            return format!("{}{unit}", length_ms / ms);
        }
    }
    format!("{length_ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(text: &str) -> Result<Window, WindowError> {
        let length = humantime::parse_duration(text).map_err(|_| WindowError::TooLong {
            length: text.into(),
        })?;
        Window::new(i64::try_from(length.as_millis()).unwrap_or(i64::MAX))
    }

    #[test]
    fn the_hop_grows_with_the_window() {
        let hops: Vec<(String, String)> = ["5m", "1h", "11h", "12h", "7d", "11d", "12d", "30d"]
            .iter()
            .map(|w| {
                let w = window(w).expect("valid");
                (w.suffix(), duration_name(w.hop_ms()))
            })
            .collect();
        let expected = [
            ("5m", "5m"),
            ("1h", "5m"),
            ("11h", "5m"),
            ("12h", "1h"),
            ("7d", "1h"),
            ("11d", "1h"),
            ("12d", "1d"),
            ("30d", "1d"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(hops, expected);
    }

    #[test]
    fn lengths_that_cannot_be_tiled_are_refused_with_a_nearer_one() {
        assert_eq!(
            window("2m").expect_err("short").to_string(),
            "a window of 2m is shorter than its hop of 5m; the shortest window is 5m"
        );
        assert_eq!(
            window("12d 5h").expect_err("not whole days").to_string(),
            "a window of 293h is not a whole number of its 1d hops (e.g. 12d)"
        );
        assert!(window("367d").is_err());
        assert_eq!(window("90m").expect("whole hops").suffix(), "90m");
        assert_eq!(window("36h").expect("whole hops").suffix(), "36h");
    }

    #[test]
    fn a_read_covers_the_aligned_tail_and_the_current_tile() {
        let hour = window("1h").expect("valid");
        // 10:07:30 → from 09:05 (the tail, aligned down to 5 minutes) to 10:10 (exclusive).
        let t = 10 * HOUR_MS + 7 * MINUTE_MS + 30_000;
        assert_eq!(hour.start_at(t), 9 * HOUR_MS + 5 * MINUTE_MS);
        assert_eq!(hour.end_at(t), 10 * HOUR_MS + 10 * MINUTE_MS);
        assert!(hour.covers(t, 9 * HOUR_MS + 5 * MINUTE_MS));
        assert!(!hour.covers(t, 9 * HOUR_MS + 5 * MINUTE_MS - 1));
        assert!(hour.covers(t, t));
        assert!(!hour.covers(t, 10 * HOUR_MS + 10 * MINUTE_MS));
        // Never more than one hop beyond the exact window at the tail.
        for t in (0..3 * HOUR_MS).step_by(7_919) {
            let extra = (t - hour.length_ms()) - hour.start_at(t);
            assert!((0..hour.hop_ms()).contains(&extra), "{t}: {extra}");
        }
    }

    #[test]
    fn tiles_before_1970_round_towards_the_past() {
        assert_eq!(tile_start(-1, 300_000), -300_000);
        assert_eq!(tile_start(0, 300_000), 0);
        assert_eq!(tile_start(299_999, 300_000), 0);
    }
}
