//! The values of a training set's rows from its entities' events, on every core: each
//! entity's events are put in publish order, then each (entity, aggregation) pair runs
//! those events through the tiles up to each of the entity's rows' times. The pairs are
//! handed out in small runs as threads free up, so one entity with most of the events
//! holds up one aggregation's worth of work, not a whole share.

use std::sync::atomic::{AtomicUsize, Ordering};

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
    events_of.sort_each_by_key(|&(published, _, _)| published);
    let order: Vec<(usize, usize)> = events_of
        .items
        .iter()
        .map(|&(_, batch, row)| (batch as usize, row as usize))
        .collect();
    let events = EventRows::gather(&events, &order)?;
    drop(order);

    let threads = std::thread::available_parallelism().map_or(1, usize::from);
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

    /// Sorts each entity's items by `key` (stable).
    fn sort_each_by_key<K: Ord>(&mut self, key: impl Fn(&T) -> K) {
        let mut rest = self.items.as_mut_slice();
        for window in self.starts.windows(2) {
            let (mine, after) = rest.split_at_mut(window[1] - window[0]);
            mine.sort_by_key(&key);
            rest = after;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
