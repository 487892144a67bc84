//! A window's value at a time `t` from the raw events, as the sidecar knew them at `t`: the
//! definition the tiles are held to, and what the offline training set computes.

use super::function::{empty_output, OrderKey, Output, State};
use super::tiles::{AggregationSpec, Event};
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
        let Some(one) = State::of(spec.function, event.value.as_ref(), order) else {
            continue;
        };
        match &mut merged {
            Some(state) => state.merge(spec.function, &one),
            None => merged = Some(one),
        }
    }
    match merged {
        Some(state) => state.output(spec.function),
        None => empty_output(spec.function, spec.float_column),
    }
}
