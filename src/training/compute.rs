//! The values of a training set's rows from its entities' events, on every core: each
//! entity's events are put in publish order (the entities sorted in runs, a run per thread
//! at a time) and laid side by side (a column per thread), then each (entity, aggregation)
//! pair runs those events through the tiles up to each of the entity's rows' times. The
//! pairs are handed out in small runs as threads free up, so one entity with most of the
//! events holds up one aggregation's worth of work, not a whole share. Each step logs its
//! time at DEBUG.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use arrow::error::ArrowError;

use super::scan::EventRows;
use crate::aggregate::{values_at_times, Aggregation, Event, Output};

/// (entity, aggregation) pairs a thread takes at a time.
const PAIRS_AT_ONCE: usize = 32;

/// An event's place: its publish time, its batch among the scan's, its row in the batch
/// (a scan's batches and their rows are far fewer than 2³²).
type EventRef = (i64, u32, u32);

/// Per row of the spine (`times`, `entity_of_row`), per aggregation, its windows' values.
pub fn compute(
    aggregations: &[Aggregation],
    times: &[i64],
    entity_of_row: &[u32],
    entities: usize,
    events: Vec<EventRows>,
) -> Result<Vec<Vec<Vec<Output>>>, ArrowError> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    compute_on(
        threads,
        aggregations,
        times,
        entity_of_row,
        entities,
        &events,
    )
}

fn compute_on(
    threads: usize,
    aggregations: &[Aggregation],
    times: &[i64],
    entity_of_row: &[u32],
    entities: usize,
    events: &[EventRows],
) -> Result<Vec<Vec<Vec<Output>>>, ArrowError> {
    let started = Instant::now();
    let rows_of = Grouped::by_entity(
        entities,
        entity_of_row
            .iter()
            .enumerate()
            .map(|(row, &entity)| (entity, row)),
    );
    let mut events_of: Grouped<EventRef> = Grouped::by_entity(
        entities,
        events.iter().enumerate().flat_map(|(batch, rows)| {
            (0..rows.len()).map(move |row| {
                let at = (rows.publish_time[row], batch as u32, row as u32);
                (rows.entity[row], at)
            })
        }),
    );
    // The scan's order breaks ties of publish time, as the order of a message's rows does.
    events_of.sort_each_by_key(threads, |&(published, _, _)| published);
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        "grouped the events by entity"
    );
    let events = EventRows::gather(events, &events_of.items)?;
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        "laid each entity's events side by side"
    );

    let pairs = entities * aggregations.len();
    let next = AtomicUsize::new(0);
    let mut values: Vec<Vec<Vec<Output>>> = vec![vec![Vec::new(); aggregations.len()]; times.len()];
    let mut failed = false;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (rows_of, events_of, events, next) = (&rows_of, &events_of, &events, &next);
                scope.spawn(move || {
                    let mut done = Vec::new();
                    let mut mine: Vec<Event> = Vec::new();
                    loop {
                        let first = next.fetch_add(PAIRS_AT_ONCE, Ordering::Relaxed);
                        if first >= pairs {
                            return done;
                        }
                        for pair in first..(first + PAIRS_AT_ONCE).min(pairs) {
                            let (entity, index) =
                                (pair / aggregations.len(), pair % aggregations.len());
                            let rows = rows_of.get(entity);
                            if rows.is_empty() {
                                continue;
                            }
                            let row_times: Vec<i64> = rows.iter().map(|&r| times[r]).collect();
                            mine.clear();
                            mine.extend(
                                events_of.range(entity).map(|row| events.event(index, row)),
                            );
                            let spec = &aggregations[index].spec;
                            let outputs = values_at_times(spec, &mine, &row_times);
                            done.extend(rows.iter().map(|&row| (row, index)).zip(outputs));
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            match worker.join() {
                Ok(done) => {
                    for ((row, index), outputs) in done {
                        values[row][index] = outputs;
                    }
                }
                Err(_) => failed = true,
            }
        }
    });
    if failed {
        return Err(ArrowError::ComputeError(
            "a thread computing the training set's values panicked".into(),
        ));
    }
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        "replayed the events"
    );
    Ok(values)
}

/// Items grouped by entity number, each entity's items one slice in the order they came
/// (a counting sort: two passes over the items, no per-entity allocation).
struct Grouped<T> {
    starts: Vec<usize>,
    items: Vec<T>,
}

impl<T: Copy + Default + Send> Grouped<T> {
    fn by_entity(entities: usize, items: impl Iterator<Item = (u32, T)> + Clone) -> Grouped<T> {
        let mut starts = vec![0usize; entities + 1];
        for (entity, _) in items.clone() {
            if let Some(count) = starts.get_mut(entity as usize + 1) {
                *count += 1;
            }
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut next = starts.clone();
        let mut placed = vec![T::default(); starts.last().copied().unwrap_or(0)];
        for (entity, item) in items {
            if let Some(slot) = next.get_mut(entity as usize) {
                placed[*slot] = item;
                *slot += 1;
            }
        }
        Grouped {
            starts,
            items: placed,
        }
    }

    /// Where `entity`'s items are among all.
    fn range(&self, entity: usize) -> std::ops::Range<usize> {
        match (self.starts.get(entity), self.starts.get(entity + 1)) {
            (Some(&start), Some(&end)) => start..end,
            _ => 0..0,
        }
    }

    fn get(&self, entity: usize) -> &[T] {
        &self.items[self.range(entity)]
    }

    /// Sorts each entity's items by `key` (stable), on `threads` threads: the entities
    /// are cut into runs of about equal items, handed out as threads free up.
    fn sort_each_by_key<K: Ord>(&mut self, threads: usize, key: impl Fn(&T) -> K + Sync) {
        let runs = threads * 8;
        let per_run = self.items.len().div_ceil(runs.max(1)).max(1);
        let mut work: Vec<(&mut [T], Vec<usize>)> = Vec::new();
        let mut rest = self.items.as_mut_slice();
        let mut lengths = Vec::new();
        let mut in_run = 0;
        for window in self.starts.windows(2) {
            lengths.push(window[1] - window[0]);
            in_run += window[1] - window[0];
            if in_run >= per_run {
                let (run, after) = rest.split_at_mut(in_run);
                work.push((run, std::mem::take(&mut lengths)));
                rest = after;
                in_run = 0;
            }
        }
        work.push((rest, lengths));
        let work = std::sync::Mutex::new(work);
        std::thread::scope(|scope| {
            for _ in 0..threads.max(1) {
                scope.spawn(|| loop {
                    let Some((mut run, lengths)) = work.lock().ok().and_then(|mut w| w.pop())
                    else {
                        return;
                    };
                    for length in lengths {
                        let (mine, after) = run.split_at_mut(length);
                        mine.sort_by_key(&key);
                        run = after;
                    }
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};

    use super::*;
    use crate::aggregate::{AggregationSpec, Function, Kind, Window};

    fn aggregation(name: &str, function: Function, column: Option<&str>) -> Aggregation {
        let windows = vec![
            Window::new(3_600_000).expect("1h"),
            Window::new(86_400_000).expect("1d"),
        ];
        Aggregation {
            name: name.into(),
            column: column.map(Into::into),
            kind: Kind::Int,
            spec: AggregationSpec::new(function, false, windows),
        }
    }

    #[test]
    fn values_are_those_of_each_entitys_events_in_publish_order_on_any_number_of_threads() {
        let aggregations = [
            aggregation("n", Function::Count, None),
            aggregation("total", Function::Sum, Some("amount")),
            aggregation("recent", Function::LastK(3), Some("amount")),
        ];
        let entities = 11;
        let mut seed = 7u64;
        let mut next = move |below: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % below
        };
        let day = 86_400_000;
        // Three scan batches of events, each entity's spread over them out of publish order.
        let mut all: Vec<(u32, Event)> = Vec::new();
        let parts: Vec<EventRows> = (0..3)
            .map(|_| {
                let rows: Vec<(u32, i64, i64, i64)> = (0..200)
                    .map(|_| {
                        let entity = next(entities as u64) as u32;
                        let published = day + next(day as u64) as i64;
                        let at = published - next(7_200_000) as i64;
                        (entity, published, at, next(1_000) as i64)
                    })
                    .collect();
                for &(entity, published, at, amount) in &rows {
                    all.push((
                        entity,
                        Event {
                            event_time: at,
                            publish_time: published,
                            value: Some(crate::aggregate::Datum::Int(amount)),
                            tie_break: u64::try_from(published).unwrap_or(0),
                        },
                    ));
                }
                let amounts: ArrayRef =
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3)));
                EventRows::of_parts(
                    rows.iter().map(|r| r.0).collect(),
                    rows.iter().map(|r| r.1).collect(),
                    rows.iter().map(|r| r.2).collect(),
                    &[None, Some(amounts.clone()), Some(amounts)],
                )
                .expect("rows")
            })
            .collect();
        // Entity 4 is asked twice, entity 10 never, entity 11 has no events.
        let spine: Vec<(u32, i64)> = (0..=11u32)
            .filter(|&e| e != 10)
            .chain([4])
            .map(|e| (e, day + next(2 * day as u64) as i64))
            .collect();
        let entity_of_row: Vec<u32> = spine.iter().map(|r| r.0).collect();
        let times: Vec<i64> = spine.iter().map(|r| r.1).collect();
        let expected: Vec<Vec<Vec<Output>>> = spine
            .iter()
            .map(|&(entity, t)| {
                let mut mine: Vec<Event> = all
                    .iter()
                    .filter(|(e, _)| *e == entity)
                    .map(|(_, ev)| ev.clone())
                    .collect();
                mine.sort_by_key(|e| e.publish_time);
                aggregations
                    .iter()
                    .map(|a| {
                        let events: Vec<Event> = mine
                            .iter()
                            .map(|e| match a.column {
                                None => Event {
                                    value: Some(crate::aggregate::Datum::Bool(true)),
                                    ..e.clone()
                                },
                                Some(_) => e.clone(),
                            })
                            .collect();
                        values_at_times(&a.spec, &events, &[t]).remove(0)
                    })
                    .collect()
            })
            .collect();
        for threads in [1, 2, 3] {
            let got = compute_on(threads, &aggregations, &times, &entity_of_row, 12, &parts)
                .expect("values");
            assert_eq!(got, expected, "{threads} threads");
        }
    }

    #[test]
    fn items_are_grouped_by_entity_in_their_order() {
        let items = [(2u32, 'a'), (0, 'b'), (2, 'c'), (0, 'd'), (9, 'x')];
        let grouped = Grouped::by_entity(3, items.iter().copied());
        assert_eq!(grouped.get(0), ['b', 'd']);
        assert!(grouped.get(1).is_empty());
        assert_eq!(grouped.get(2), ['a', 'c']);
        assert!(grouped.get(3).is_empty());
    }
}
