//! A window's value at a time `t` from the raw events, as the sidecar knew them at `t`: the
//! definition the tiles are held to, and what the offline training set computes.

use super::function::{empty_output, OrderKey, Output, State};
use super::tiles::{AggregationSpec, Event, Tiles};
use super::window::Window;

/// The value of `window` at `t` over `events` (in any order): the events published at or
/// before `t` whose event time the window covers at `t`.
pub fn value_at<'a>(
    spec: &AggregationSpec,
    window: &Window,
    events: impl IntoIterator<Item = &'a Event>,
    t: i64,
) -> Output {
    let mut merged: Option<State> = None;
    for event in events {
        if event.publish_time > t || !window.covers(t, event.event_time) {
            continue;
        }
        let order: OrderKey = (event.event_time, event.tie_break);
        let Some(one) = State::of(spec.function(), event.value.as_ref(), order) else {
            continue;
        };
        match &mut merged {
            Some(state) => state.merge(spec.function(), &one),
            None => merged = Some(one),
        }
    }
    match merged {
        Some(state) => state.output(spec.function()),
        None => empty_output(spec.function(), spec.float_column()),
    }
}

/// The values of every window of `aggregation` at each of `times`, for one entity's
/// `events` in publish order (each with the aggregation's column value). The events go
/// through the same tiles the online store keeps, in that order, up to each time, so the
/// values are those `value_at` defines, computed with the online store's arithmetic.
/// Returns one row per time, in the order of `times`, holding the windows in turn.
pub fn values_at_times(
    aggregation: &AggregationSpec,
    events: &[Event],
    times: &[i64],
) -> Vec<Vec<Output>> {
    let mut events = events.iter().peekable();
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by_key(|&i| times[i]);
    let mut tiles = Tiles::default();
    let mut rows = vec![Vec::new(); times.len()];
    for i in order {
        let t = times[i];
        while let Some(event) = events.next_if(|e| e.publish_time <= t) {
            tiles.apply(aggregation, event);
        }
        tiles.evict(aggregation, t);
        rows[i] = aggregation
            .windows()
            .iter()
            .map(|w| tiles.read(aggregation, w, t))
            .collect();
    }
    rows
}
