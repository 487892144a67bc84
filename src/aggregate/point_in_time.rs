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

/// The values of every window of `aggregations` at each of `times`, for one entity's
/// `events` (in any order; each message gives one event per aggregation, with that
/// aggregation's column value): the rows of a training set. The events go through the same
/// tiles the online store keeps, in publish order, up to each time, so the values are
/// those `value_at` defines, computed with the online store's arithmetic. Returns one row
/// per time, in the order of `times`, each holding the windows of each aggregation in turn.
pub fn values_at_times(
    aggregations: &[AggregationSpec],
    events: &mut [Vec<Event>],
    times: &[i64],
) -> Vec<Vec<Output>> {
    events.sort_by_key(|e| e.first().map(|e| (e.publish_time, e.tie_break)));
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by_key(|&i| times[i]);
    let mut tiles = vec![Tiles::default(); aggregations.len()];
    let mut rows = vec![Vec::new(); times.len()];
    let mut next = 0;
    for i in order {
        let t = times[i];
        while let Some(message) = events
            .get(next)
            .filter(|m| m.first().is_none_or(|e| e.publish_time <= t))
        {
            for ((spec, tiles), event) in aggregations.iter().zip(tiles.iter_mut()).zip(message) {
                tiles.apply(spec, event);
            }
            next += 1;
        }
        for (spec, tiles) in aggregations.iter().zip(tiles.iter_mut()) {
            tiles.evict(spec, t);
            rows[i].extend(spec.windows().iter().map(|w| tiles.read(spec, w, t)));
        }
    }
    rows
}
