//! What makes a replay harmless: counts and sums are not idempotent, so an entity's tiles
//! remember, per stream, the position of the newest event they hold, and an event at or
//! below it is one they already hold. A stream delivers in order and redelivers from an
//! older position after a crash or a hand-over, so one position per stream and entity is
//! enough, however the redelivered batches are cut. The online store keeps these positions
//! beside the tiles and updates both at once.

use std::collections::BTreeMap;

use super::tiles::{AggregationSpec, Applied, Event, Tiles};

/// Per stream, the position of the newest event an entity's tiles hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedPositions<P> {
    by_stream: BTreeMap<String, P>,
}

impl<P> Default for AppliedPositions<P> {
    fn default() -> Self {
        AppliedPositions {
            by_stream: BTreeMap::new(),
        }
    }
}

/// What applying a batch of an entity's events did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// Events applied to the tiles (kept by at least one aggregation, or skipped by all as
    /// null).
    pub applied: usize,
    /// Events the tiles already held (redelivered): not applied again.
    pub already_held: usize,
    /// Events no window can cover any more (late): dropped, and counted by the pipeline.
    pub late: usize,
}

impl<P: Ord + Clone> AppliedPositions<P> {
    /// The position of the newest event held from `stream`.
    pub fn get(&self, stream: &str) -> Option<&P> {
        self.by_stream.get(stream)
    }

    /// Every stream with its position, for storing them.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &P)> {
        self.by_stream.iter().map(|(s, p)| (s.as_str(), p))
    }

    /// `true` when the event at `position` of `stream` is not held yet.
    pub fn is_new(&self, stream: &str, position: &P) -> bool {
        self.by_stream
            .get(stream)
            .is_none_or(|held| position > held)
    }

    /// Records that the event at `position` of `stream` is held.
    pub fn hold(&mut self, stream: &str, position: P) {
        match self.by_stream.get_mut(stream) {
            Some(held) if *held >= position => {}
            Some(held) => *held = position,
            None => {
                self.by_stream.insert(stream.to_string(), position);
            }
        }
    }

    /// Applies to `tiles` (one per spec of `specs`) the events of one entity, in delivery
    /// order, that they do not hold yet, and records their positions. Each message gives
    /// one event per spec (the same times, each with its own column's value).
    pub fn apply_new<'a>(
        &mut self,
        specs: &[AggregationSpec],
        tiles: &mut [Tiles],
        events: impl IntoIterator<Item = (&'a str, P, &'a [Event])>,
    ) -> ReplayOutcome {
        let mut outcome = ReplayOutcome::default();
        for (stream, position, event) in events {
            if !self.is_new(stream, &position) {
                outcome.already_held += 1;
                continue;
            }
            let mut late_for_all = !specs.is_empty();
            for ((spec, tiles), event) in specs.iter().zip(tiles.iter_mut()).zip(event) {
                late_for_all &= tiles.apply(spec, event) == Applied::Late;
            }
            if late_for_all {
                outcome.late += 1;
            } else {
                outcome.applied += 1;
            }
            self.hold(stream, position);
        }
        outcome
    }
}

/// `true` when `event` is stamped further in the future than `max_skew_ms` after its
/// publish time: such an event is dead-lettered, never applied, since it would sit in the
/// tiles counted by no read until its time comes and skew every window it then enters.
pub fn is_future(event: &Event, max_skew_ms: i64) -> bool {
    event.event_time > event.publish_time.saturating_add(max_skew_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{Datum, Function, Window};

    fn event(i: u64) -> Event {
        let at = 1_000_000 + i as i64 * 1_000;
        Event {
            event_time: at - 500,
            publish_time: at,
            value: Some(Datum::Int(i as i64)),
            tie_break: i,
        }
    }

    fn specs() -> Vec<AggregationSpec> {
        [Function::Count, Function::Sum]
            .into_iter()
            .map(|function| {
                AggregationSpec::new(function, false, vec![Window::new(3_600_000).expect("1h")])
            })
            .collect()
    }

    #[test]
    fn redelivered_batches_cut_differently_count_once() {
        let specs = specs();
        // Two streams (partitions), 40 events alternating between them.
        let events: Vec<(String, u64, Vec<Event>)> = (0..40)
            .map(|i| (format!("p{}", i % 2), i / 2, vec![event(i); 2]))
            .collect();
        let as_batch = |range: std::ops::Range<usize>| {
            events[range]
                .iter()
                .map(|(s, p, e)| (s.as_str(), *p, e.as_slice()))
                .collect::<Vec<_>>()
        };
        let mut once = vec![Tiles::default(); 2];
        let mut once_positions = AppliedPositions::default();
        once_positions.apply_new(&specs, &mut once, as_batch(0..40));

        // The same events as a crash would redeliver them: 0..25 applied, then 10..40 again
        // (from an older acknowledged position), then 30..40 once more.
        let mut replayed = vec![Tiles::default(); 2];
        let mut positions = AppliedPositions::default();
        let first = positions.apply_new(&specs, &mut replayed, as_batch(0..25));
        let second = positions.apply_new(&specs, &mut replayed, as_batch(10..40));
        let third = positions.apply_new(&specs, &mut replayed, as_batch(30..40));
        assert_eq!((first.applied, first.already_held), (25, 0));
        assert_eq!((second.applied, second.already_held), (15, 15));
        assert_eq!((third.applied, third.already_held), (0, 10));
        assert_eq!(replayed, once);
        assert_eq!(positions, once_positions);
        assert_eq!(positions.get("p0"), Some(&19));
        let window = specs[1].windows()[0];
        assert_eq!(
            replayed[1].read(&specs[1], &window, 1_040_000),
            crate::aggregate::Output::Int((0..40).sum())
        );
    }

    #[test]
    fn late_events_are_counted_and_held_so_they_are_not_late_twice() {
        let specs = specs();
        let mut tiles = vec![Tiles::default(); 2];
        let mut positions = AppliedPositions::default();
        let mut late = event(1);
        late.event_time = late.publish_time - 3 * 3_600_000;
        // The sum's column is null: late all the same.
        let mut late = vec![late; 2];
        late[1].value = None;
        let outcome = positions.apply_new(&specs, &mut tiles, [("p0", 7_u64, late.as_slice())]);
        assert_eq!((outcome.applied, outcome.late), (0, 1));
        let again = positions.apply_new(&specs, &mut tiles, [("p0", 7_u64, late.as_slice())]);
        assert_eq!((again.late, again.already_held), (0, 1));
    }

    #[test]
    fn events_beyond_the_allowed_skew_are_future_ones() {
        let mut e = event(0);
        e.event_time = e.publish_time + 60_000;
        assert!(!is_future(&e, 60_000));
        e.event_time += 1;
        assert!(is_future(&e, 60_000));
    }
}
