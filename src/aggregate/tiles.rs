//! The tiles of one aggregation of one entity: a partial aggregate per hop-long slice of
//! event time, for each hop its windows use, and the reads and evictions over them.
//!
//! Which events a tile keeps is decided by the event's own publish time, never by a clock:
//! an event is late for a hop when no read at or after its publish time can cover it
//! (`event_time < floor((publish_time − longest window of that hop) / hop) · hop`); it then
//! changes no value that can ever be read, so dropping it loses nothing, and replaying the
//! same events gives the same tiles on any replica.

use std::collections::BTreeMap;

use super::function::{empty_output, Datum, Function, OrderKey, Output, State};
use super::window::{tile_start, Window};

/// One aggregation as the tiles need it: its function, its column's kind and its windows.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregationSpec {
    function: Function,
    float_column: bool,
    windows: Vec<Window>,
    /// The hops its windows use, each with the longest window using it (what its tiles
    /// must cover), in increasing order of hop; worked out once, read per event.
    retention: Vec<(i64, i64)>,
}

impl AggregationSpec {
    /// `function` over a column of floats (`float_column`: a sum of floats is a float) or
    /// not, read over `windows`.
    pub fn new(function: Function, float_column: bool, windows: Vec<Window>) -> Self {
        let mut by_hop = BTreeMap::new();
        for window in &windows {
            let longest = by_hop.entry(window.hop_ms()).or_insert(0);
            *longest = window.length_ms().max(*longest);
        }
        AggregationSpec {
            function,
            float_column,
            windows,
            retention: by_hop.into_iter().collect(),
        }
    }

    /// What it computes.
    pub fn function(&self) -> Function {
        self.function
    }

    /// `true` when the column holds floats.
    pub fn float_column(&self) -> bool {
        self.float_column
    }

    /// Its windows, each read as a feature.
    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// The hops its windows use with the longest window of each, in increasing order of hop.
    pub fn retention_by_hop(&self) -> &[(i64, i64)] {
        &self.retention
    }

    /// The longest of its windows plus its hop: how long an entity's tiles stay useful after
    /// its last event.
    pub fn longest_reach_ms(&self) -> i64 {
        self.retention
            .iter()
            .map(|(hop, longest)| hop + longest)
            .max()
            .unwrap_or(0)
    }
}

/// One event as an aggregation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When it happened (the pipeline's event-time field), in ms since 1970.
    pub event_time: i64,
    /// When its message was published, in ms since 1970.
    pub publish_time: i64,
    /// The aggregated column's value (`None`: null); for a `count` without a column, any
    /// present value.
    pub value: Option<Datum>,
    /// What breaks ties of event time for `last_k` (the message's position).
    pub tie_break: u64,
}

/// What applying an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// It updated at least one tile.
    Kept,
    /// No read at or after its publish time covers it: it was dropped (counted by the
    /// pipeline as late).
    Late,
    /// Its value is one the function skips (null, NaN): no tile changed.
    Skipped,
}

/// The tiles of one aggregation of one entity, by hop, then by tile start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tiles {
    by_hop: BTreeMap<i64, BTreeMap<i64, State>>,
}

impl Tiles {
    /// Applies `event` to the tile of each hop it falls in and is not late for. An event
    /// late for every hop is [`Applied::Late`] whatever its value, so that a late event
    /// counts as late in every aggregation, null or not.
    pub fn apply(&mut self, spec: &AggregationSpec, event: &Event) -> Applied {
        let in_time = |&&(hop, longest): &&(i64, i64)| {
            event.event_time >= oldest_kept(event.publish_time, hop, longest)
        };
        if !spec.retention_by_hop().iter().any(|r| in_time(&r)) {
            return Applied::Late;
        }
        let order: OrderKey = (event.event_time, event.tie_break);
        let Some(state) = State::of(spec.function(), event.value.as_ref(), order) else {
            return Applied::Skipped;
        };
        let mut hops = spec.retention_by_hop().iter().filter(in_time).peekable();
        while let Some(&(hop, _)) = hops.next() {
            let tiles = self.by_hop.entry(hop).or_default();
            match tiles.entry(tile_start(event.event_time, hop)) {
                std::collections::btree_map::Entry::Occupied(mut tile) => {
                    tile.get_mut().merge(spec.function(), &state)
                }
                // The last hop takes the state itself: a `last_k` state holds a copy of a
                // text value, made once per hop and no more.
                std::collections::btree_map::Entry::Vacant(tile) if hops.peek().is_none() => {
                    tile.insert(state);
                    break;
                }
                std::collections::btree_map::Entry::Vacant(tile) => {
                    tile.insert(state.clone());
                }
            }
        }
        Applied::Kept
    }

    /// Drops the tiles no read at or after `now` can cover (and, for `last_k`, the values no
    /// such read can return); returns how many tiles were dropped.
    pub fn evict(&mut self, spec: &AggregationSpec, now: i64) -> usize {
        let mut dropped = 0;
        for &(hop, longest) in spec.retention_by_hop() {
            if let Some(tiles) = self.by_hop.get_mut(&hop) {
                let keep = tiles.split_off(&oldest_kept(now, hop, longest));
                dropped += tiles.len();
                *tiles = keep;
            }
        }
        if let Function::LastK(k) = spec.function() {
            for tiles in self.by_hop.values_mut() {
                dropped += keep_newest(tiles, k, now);
            }
        }
        self.by_hop.retain(|_, tiles| !tiles.is_empty());
        dropped
    }

    /// The value of `window` (one of the spec's) read at `t`.
    pub fn read(&self, spec: &AggregationSpec, window: &Window, t: i64) -> Output {
        let merged = self.by_hop.get(&window.hop_ms()).and_then(|tiles| {
            let mut covered = tiles.range(window.start_at(t)..window.end_at(t));
            let (_, first) = covered.next()?;
            let mut merged = first.clone();
            for (_, state) in covered {
                merged.merge(spec.function(), state);
            }
            Some(merged)
        });
        match merged {
            Some(state) => state.output(spec.function()),
            None => empty_output(spec.function(), spec.float_column()),
        }
    }

    /// The tiles of each hop (`tile start → state`), in increasing order of hop.
    pub fn hops(&self) -> impl Iterator<Item = (i64, &BTreeMap<i64, State>)> {
        self.by_hop.iter().map(|(hop, tiles)| (*hop, tiles))
    }

    /// Tiles as [`Tiles::hops`] gave them (read back from a store).
    pub fn from_hops(hops: impl IntoIterator<Item = (i64, BTreeMap<i64, State>)>) -> Tiles {
        Tiles {
            by_hop: hops.into_iter().filter(|(_, t)| !t.is_empty()).collect(),
        }
    }

    /// How many tiles are kept, over all hops.
    pub fn len(&self) -> usize {
        self.by_hop.values().map(BTreeMap::len).sum()
    }

    /// `true` when no tile is kept.
    pub fn is_empty(&self) -> bool {
        self.by_hop.is_empty()
    }
}

/// Keeps in `tiles` only the values `last_k` can still return at or after `now`: walking
/// from the newest tile that starts at or before `now`, once `k` values are kept, older
/// values have `k` newer ones that every later read covering them covers too. Tiles after
/// `now` (events stamped in the future) are kept whole and not counted, since reads before
/// their tile starts do not cover them. Returns how many tiles became empty and were dropped.
fn keep_newest(tiles: &mut BTreeMap<i64, State>, k: usize, now: i64) -> usize {
    let mut kept = 0;
    for (_, state) in tiles.range_mut(..=now).rev() {
        if let State::Newest(values) = state {
            values.truncate(k.saturating_sub(kept));
            kept += values.len();
        }
    }
    let before = tiles.len();
    tiles.retain(|_, state| !matches!(state, State::Newest(values) if values.is_empty()));
    before - tiles.len()
}

/// The start of the oldest tile of `hop` a read at or after `now` can cover, given the
/// longest window using that hop.
fn oldest_kept(now: i64, hop: i64, longest: i64) -> i64 {
    tile_start(now - longest, hop)
}
