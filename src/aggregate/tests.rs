//! The tiles against the point-in-time definition: events out of order, late and slightly in
//! the future, applied in publish order with evictions, read at many times, must give the
//! values `value_at` computes from the raw events.

use super::*;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// SplitMix64: a fixed seed gives the same events on every run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: i64) -> i64 {
        i64::try_from(self.next() % n.unsigned_abs()).unwrap_or(0)
    }
}

fn windows(lengths: &[i64]) -> Vec<Window> {
    lengths
        .iter()
        .map(|&l| Window::new(l).expect("valid window"))
        .collect()
}

/// Events published over `span` ms: most a few seconds after they happened, some hours or
/// days late, a few up to a minute in the future, every tenth value null.
fn events(random: &mut Random, count: usize, span: i64, float: bool) -> Vec<Event> {
    let mut events: Vec<Event> = (0..count)
        .map(|i| {
            let publish_time = random.below(span);
            let delay = match random.below(100) {
                0..=79 => random.below(5_000),
                80..=91 => random.below(6 * HOUR),
                92..=97 => random.below(40 * DAY),
                _ => -random.below(MINUTE),
            };
            let raw = random.below(2_000) - 1_000;
            let value = match (i % 10, float) {
                (0, _) => None,
                (_, true) => Some(Datum::Float(raw as f64 / 7.0)),
                (_, false) => Some(Datum::Int(raw)),
            };
            Event {
                event_time: publish_time - delay,
                publish_time,
                value,
                tie_break: i as u64,
            }
        })
        .collect();
    events.sort_by_key(|e| e.publish_time);
    events
}

fn close(a: &Output, b: &Output) -> bool {
    match (a, b) {
        (Output::Float(x), Output::Float(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
        _ => a == b,
    }
}

#[test]
fn tiles_read_what_the_raw_events_give_at_every_time() {
    let functions = [
        Function::Count,
        Function::Sum,
        Function::Avg,
        Function::Min,
        Function::Max,
        Function::LastK(5),
        Function::ApproxDistinct,
    ];
    let mut random = Random(7);
    let span = 45 * DAY;
    for float in [false, true] {
        let all = events(&mut random, 4_000, span, float);
        for function in functions {
            let spec = AggregationSpec::new(
                function,
                float,
                windows(&[HOUR, 90 * MINUTE, DAY, 7 * DAY, 30 * DAY]),
            );
            let mut tiles = Tiles::default();
            let mut applied = 0;
            let mut late = 0;
            let mut reads = 0;
            // Reads at times in increasing order, each after the events published by then.
            let mut times: Vec<i64> = (0..60).map(|_| random.below(span + DAY)).collect();
            times.sort_unstable();
            for t in times {
                while applied < all.len() && all[applied].publish_time <= t {
                    if tiles.apply(&spec, &all[applied]) == Applied::Late {
                        late += 1;
                    }
                    applied += 1;
                }
                tiles.evict(&spec, t);
                for window in spec.windows() {
                    let online = tiles.read(&spec, window, t);
                    let offline = value_at(&spec, window, &all, t);
                    assert!(
                        close(&online, &offline),
                        "{} over {window} at {t}: tiles {online:?}, events {offline:?}",
                        function.name()
                    );
                    reads += 1;
                }
            }
            assert_eq!(reads, 300);
            assert!(late > 0, "the events include some beyond every window");
        }
    }
}

#[test]
fn values_decay_as_the_window_passes_without_new_events() {
    let spec = AggregationSpec::new(Function::Count, false, windows(&[HOUR]));
    let window = spec.windows()[0];
    let mut tiles = Tiles::default();
    for minute in 0..10 {
        let at = 10 * HOUR + minute * MINUTE;
        let event = Event {
            event_time: at,
            publish_time: at,
            value: Some(Datum::Bool(true)),
            tie_break: 0,
        };
        assert_eq!(tiles.apply(&spec, &event), Applied::Kept);
    }
    let count = |t: i64| match tiles.read(&spec, &window, t) {
        Output::Int(n) => n,
        other => panic!("a count is an integer: {other:?}"),
    };
    assert_eq!(count(10 * HOUR + 10 * MINUTE), 10);
    // The 10:00–10:04 tile leaves the window once the tail passes 10:05 (at 11:05).
    assert_eq!(count(11 * HOUR + 4 * MINUTE), 10);
    assert_eq!(count(11 * HOUR + 5 * MINUTE), 5);
    assert_eq!(count(11 * HOUR + 10 * MINUTE), 0);
}

#[test]
fn evicted_tiles_are_those_no_later_read_covers() {
    let spec = AggregationSpec::new(Function::Sum, false, windows(&[HOUR, DAY]));
    let mut tiles = Tiles::default();
    for hour in 0..48 {
        let at = hour * HOUR;
        tiles.apply(
            &spec,
            &Event {
                event_time: at,
                publish_time: at,
                value: Some(Datum::Int(1)),
                tie_break: 0,
            },
        );
    }
    let before = tiles.len();
    let dropped = tiles.evict(&spec, 48 * HOUR);
    assert_eq!(before - dropped, tiles.len());
    // Kept: 5-minute tiles from 47:00, hourly tiles from 24:00.
    assert_eq!(tiles.len(), 1 + 24);
    let late = Event {
        event_time: 20 * HOUR,
        publish_time: 48 * HOUR,
        value: Some(Datum::Int(1)),
        tie_break: 0,
    };
    assert_eq!(tiles.apply(&spec, &late), Applied::Late);
}

#[test]
fn training_rows_are_the_point_in_time_values_at_each_time() {
    let mut random = Random(11);
    let mut all = events(&mut random, 2_000, 40 * DAY, true);
    let aggregations: Vec<AggregationSpec> = [Function::Count, Function::Avg, Function::LastK(3)]
        .into_iter()
        .map(|function| AggregationSpec::new(function, true, windows(&[HOUR, DAY, 30 * DAY])))
        .collect();
    // Each aggregation reads its own column: the last_k one the values negated.
    let column_of = |spec: usize, e: &Event| {
        let mut e = e.clone();
        if spec == 2 {
            e.value = match e.value {
                Some(Datum::Float(f)) => Some(Datum::Float(-f)),
                other => other,
            };
        }
        e
    };
    let columns: Vec<Vec<Event>> = (0..aggregations.len())
        .map(|spec| all.iter().map(|e| column_of(spec, e)).collect())
        .collect();
    // Times in no order, some repeated, some before every event.
    let mut times: Vec<i64> = (0..200).map(|_| random.below(41 * DAY) - DAY).collect();
    times.push(times[3]);
    let expected: Vec<Vec<Output>> = times
        .iter()
        .map(|&t| {
            aggregations
                .iter()
                .zip(&columns)
                .flat_map(|(spec, events)| {
                    spec.windows()
                        .iter()
                        .map(move |w| value_at(spec, w, events, t))
                })
                .collect()
        })
        .collect();
    all.reverse();
    all.sort_by_key(|e| e.publish_time);
    let per_aggregation: Vec<Vec<Vec<Output>>> = aggregations
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let events: Vec<Event> = all.iter().map(|e| column_of(index, e)).collect();
            values_at_times(spec, &events, &times)
        })
        .collect();
    let rows: Vec<Vec<Output>> = (0..times.len())
        .map(|row| {
            per_aggregation
                .iter()
                .flat_map(|values| values[row].clone())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), times.len());
    for (row, (want, t)) in rows.iter().zip(expected.iter().zip(&times)) {
        assert_eq!(row.len(), 9);
        for (got, want) in row.iter().zip(want) {
            assert!(close(got, want), "at {t}: {got:?} against {want:?}");
        }
    }
}
