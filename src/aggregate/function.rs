//! The aggregation functions: what a tile keeps of the events it holds, how two tiles merge,
//! and the feature value a merged state gives.
//!
//! A tile's state is a partial aggregate: merging the tiles of a window gives the same state
//! as applying its events one by one, whatever the order the events arrived in (sums of
//! floats up to rounding: they are compensated, so a window's sum is within a few units in
//! the last place of the exact sum). Null values, and NaN in float columns, are skipped by
//! every function; a `count` without a column is given a value for each event, so it counts
//! events.

use std::cmp::Ordering;

use super::sketch::{hash_bytes, Sketch};

/// What an aggregation computes over the events of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Function {
    /// How many values (events, when no column is named).
    Count,
    /// The sum of the column's values.
    Sum,
    /// The mean of the column's values; null without any.
    Avg,
    /// The smallest value; null without any.
    Min,
    /// The largest value; null without any.
    Max,
    /// The `k` newest values by event time, newest first.
    LastK(usize),
    /// How many distinct values, estimated with a HyperLogLog sketch (about 1.6 % off).
    ApproxDistinct,
}

impl Function {
    /// The function's name in a pipeline file.
    pub fn name(&self) -> &'static str {
        match self {
            Function::Count => "count",
            Function::Sum => "sum",
            Function::Avg => "avg",
            Function::Min => "min",
            Function::Max => "max",
            Function::LastK(_) => "last_k",
            Function::ApproxDistinct => "approx_distinct",
        }
    }
}

/// A value of the aggregated column, as decoded from an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    /// `int` and `long` columns.
    Int(i64),
    /// `float` and `double` columns.
    Float(f64),
    /// `string` columns.
    Text(String),
    /// `boolean` columns.
    Bool(bool),
}

/// A feature value an aggregation gives at a read.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Counts, and sums, minimums and maximums of integer columns.
    Int(i64),
    /// Means, and sums, minimums and maximums of float columns.
    Float(f64),
    /// `last_k`: newest first.
    List(Vec<Datum>),
    /// No value in the window (avg, min, max).
    Null,
}

/// The partial aggregate of one tile (or of several merged).
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Events or non-null values counted.
    Count(u64),
    /// Exact sum of integers (wider than any column, so that no tile overflows).
    IntSum(i128),
    /// Compensated (Neumaier) sum of floats: `sum + compensation` is the sum.
    FloatSum {
        /// The running sum.
        sum: f64,
        /// What rounding lost from it.
        compensation: f64,
    },
    /// The pieces of a mean.
    Avg {
        /// The sum of the values.
        sum: f64,
        /// What rounding lost from the sum.
        compensation: f64,
        /// How many values.
        count: u64,
    },
    /// The extreme integer seen (min or max by the function).
    IntExtreme(i64),
    /// The extreme float seen (min or max by the function).
    FloatExtreme(f64),
    /// The newest values with their order keys, newest first, at most `k`.
    Newest(Vec<(OrderKey, Datum)>),
    /// The sketch of the distinct values seen.
    Distinct(Sketch),
}

/// What orders the events of `last_k`: event time, then a tie-break the caller gives
/// (the position of the message in its stream), so that every replay orders alike.
pub type OrderKey = (i64, u64);

impl State {
    /// The state of a tile holding one event, `None` when the function skips its value.
    pub fn of(function: Function, value: Option<&Datum>, order: OrderKey) -> Option<State> {
        match (function, value) {
            (_, None) => None,
            (_, Some(Datum::Float(f))) if f.is_nan() => None,
            (Function::Count, Some(_)) => Some(State::Count(1)),
            (Function::Sum, Some(Datum::Int(i))) => Some(State::IntSum(i128::from(*i))),
            (Function::Sum, Some(Datum::Float(f))) => Some(State::FloatSum {
                sum: *f,
                compensation: 0.0,
            }),
            (Function::Avg, Some(d)) => number(d).map(|sum| State::Avg {
                sum,
                compensation: 0.0,
                count: 1,
            }),
            (Function::Min | Function::Max, Some(Datum::Int(i))) => Some(State::IntExtreme(*i)),
            (Function::Min | Function::Max, Some(Datum::Float(f))) => Some(State::FloatExtreme(*f)),
            (Function::LastK(_), Some(d)) => Some(State::Newest(vec![(order, d.clone())])),
            (Function::ApproxDistinct, Some(d)) => {
                Some(State::Distinct(Sketch::of_hash(distinct_hash(d))))
            }
            // Types the checks of the pipeline file refuse (e.g. sum of a string).
            _ => None,
        }
    }

    /// Adds `other` (a state of the same function) into this one.
    pub fn merge(&mut self, function: Function, other: &State) {
        match (self, other) {
            (State::Count(a), State::Count(b)) => *a += b,
            (State::IntSum(a), State::IntSum(b)) => *a = a.saturating_add(*b),
            (
                State::FloatSum { sum, compensation },
                State::FloatSum {
                    sum: other_sum,
                    compensation: other_compensation,
                },
            ) => {
                add_compensated(sum, compensation, *other_sum);
                *compensation += other_compensation;
            }
            (
                State::Avg {
                    sum,
                    compensation,
                    count,
                },
                State::Avg {
                    sum: other_sum,
                    compensation: other_compensation,
                    count: other_count,
                },
            ) => {
                add_compensated(sum, compensation, *other_sum);
                *compensation += other_compensation;
                *count += other_count;
            }
            (State::IntExtreme(a), State::IntExtreme(b)) => {
                *a = if function == Function::Min {
                    (*a).min(*b)
                } else {
                    (*a).max(*b)
                }
            }
            (State::FloatExtreme(a), State::FloatExtreme(b)) => {
                let keep_other = match function {
                    Function::Min => b.total_cmp(a) == Ordering::Less,
                    _ => b.total_cmp(a) == Ordering::Greater,
                };
                if keep_other {
                    *a = *b;
                }
            }
            (State::Newest(a), State::Newest(b)) => {
                let k = match function {
                    Function::LastK(k) => k,
                    _ => usize::MAX,
                };
                if let [one] = b.as_slice() {
                    // One value, as each event brings: put in place among the newest (the
                    // values are newest first), unless held already or too old to keep.
                    match a.binary_search_by(|held| one.0.cmp(&held.0)) {
                        Ok(_) => {}
                        Err(at) if at < k => {
                            a.insert(at, one.clone());
                            a.truncate(k);
                        }
                        Err(_) => {}
                    }
                    return;
                }
                a.extend(b.iter().cloned());
                a.sort_by_key(|entry| std::cmp::Reverse(entry.0));
                a.dedup_by(|x, y| x.0 == y.0);
                a.truncate(k);
            }
            (State::Distinct(a), State::Distinct(b)) => a.merge(b),
            // States of different functions never meet: a tile belongs to one aggregation.
            _ => {}
        }
    }

    /// The feature value of this state.
    pub fn output(&self, function: Function) -> Output {
        match self {
            State::Count(n) => Output::Int(i64::try_from(*n).unwrap_or(i64::MAX)),
            State::IntSum(s) => {
                Output::Int(i64::try_from(*s).unwrap_or(if *s < 0 { i64::MIN } else { i64::MAX }))
            }
            State::FloatSum { sum, compensation } => Output::Float(sum + compensation),
            State::Avg {
                sum,
                compensation,
                count,
            } => {
                if *count == 0 {
                    Output::Null
                } else {
                    Output::Float((sum + compensation) / *count as f64)
                }
            }
            State::IntExtreme(v) => Output::Int(*v),
            State::FloatExtreme(v) => Output::Float(*v),
            State::Newest(values) => {
                let k = match function {
                    Function::LastK(k) => k,
                    _ => usize::MAX,
                };
                Output::List(values.iter().take(k).map(|(_, d)| d.clone()).collect())
            }
            State::Distinct(sketch) => {
                Output::Int(i64::try_from(sketch.estimate()).unwrap_or(i64::MAX))
            }
        }
    }
}

/// The value of a window without any event: 0 for counts, sums and distinct values, an
/// empty list for `last_k`, null for the rest.
pub fn empty_output(function: Function, float_column: bool) -> Output {
    match function {
        Function::Count | Function::ApproxDistinct => Output::Int(0),
        Function::Sum if float_column => Output::Float(0.0),
        Function::Sum => Output::Int(0),
        Function::LastK(_) => Output::List(Vec::new()),
        Function::Avg | Function::Min | Function::Max => Output::Null,
    }
}

/// The hash `approx_distinct` counts a value by: `hash_bytes` of an integer's 8
/// little-endian bytes, a float's bit pattern (−0 as 0), a string's UTF-8, a boolean's one
/// byte. Stored tiles depend on it: a change makes old tiles count values twice.
pub fn distinct_hash(value: &Datum) -> u64 {
    match value {
        Datum::Int(i) => hash_bytes(&i.to_le_bytes()),
        Datum::Float(f) => hash_bytes(
            &(if *f == 0.0 { 0.0f64 } else { *f })
                .to_bits()
                .to_le_bytes(),
        ),
        Datum::Text(s) => hash_bytes(s.as_bytes()),
        Datum::Bool(b) => hash_bytes(&[u8::from(*b)]),
    }
}

fn number(datum: &Datum) -> Option<f64> {
    match datum {
        Datum::Int(i) => Some(*i as f64),
        Datum::Float(f) => Some(*f),
        Datum::Text(_) | Datum::Bool(_) => None,
    }
}

/// Neumaier's step: adds `value` to `sum`, keeping what rounding lost in `compensation`.
fn add_compensated(sum: &mut f64, compensation: &mut f64, value: f64) {
    let total = *sum + value;
    if sum.abs() >= value.abs() {
        *compensation += (*sum - total) + value;
    } else {
        *compensation += (value - total) + *sum;
    }
    *sum = total;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(function: Function, values: &[Datum]) -> Option<State> {
        let mut state: Option<State> = None;
        for (i, v) in values.iter().enumerate() {
            let Some(one) = State::of(function, Some(v), (i as i64, 0)) else {
                continue;
            };
            match &mut state {
                Some(s) => s.merge(function, &one),
                None => state = Some(one),
            }
        }
        state
    }

    #[test]
    fn each_function_gives_its_value() {
        let ints = [Datum::Int(4), Datum::Int(-2), Datum::Int(9)];
        let out = |f| fold(f, &ints).map(|s| s.output(f));
        assert_eq!(out(Function::Count), Some(Output::Int(3)));
        assert_eq!(out(Function::Sum), Some(Output::Int(11)));
        assert_eq!(out(Function::Min), Some(Output::Int(-2)));
        assert_eq!(out(Function::Max), Some(Output::Int(9)));
        assert_eq!(out(Function::Avg), Some(Output::Float(11.0 / 3.0)));
        assert_eq!(
            out(Function::LastK(2)),
            Some(Output::List(vec![Datum::Int(9), Datum::Int(-2)]))
        );
    }

    #[test]
    fn nulls_and_nan_are_skipped_by_every_function() {
        let f = Function::Sum;
        assert_eq!(State::of(f, None, (0, 0)), None);
        assert_eq!(State::of(f, Some(&Datum::Float(f64::NAN)), (0, 0)), None);
        assert_eq!(State::of(Function::Count, None, (0, 0)), None);
        assert_eq!(
            State::of(Function::Count, Some(&Datum::Bool(false)), (0, 0)),
            Some(State::Count(1))
        );
        assert_eq!(State::of(f, Some(&Datum::Text("x".into())), (0, 0)), None);
    }

    #[test]
    fn compensated_sums_keep_what_plain_sums_lose() {
        let values = [Datum::Float(1e16), Datum::Float(1.0), Datum::Float(-1e16)];
        let state = fold(Function::Sum, &values).expect("values");
        assert_eq!(state.output(Function::Sum), Output::Float(1.0));
    }

    #[test]
    fn merging_in_any_order_gives_the_same_newest_values() {
        let f = Function::LastK(3);
        let one = |t: i64, v: i64| State::of(f, Some(&Datum::Int(v)), (t, 0)).expect("value");
        let mut a = one(5, 50);
        a.merge(f, &one(1, 10));
        a.merge(f, &one(7, 70));
        let mut b = one(7, 70);
        b.merge(f, &one(3, 30));
        b.merge(f, &one(5, 50));
        b.merge(f, &one(1, 10));
        // The same event merged twice (the same order key) is kept once.
        a.merge(f, &one(3, 30));
        a.merge(f, &one(3, 30));
        assert_eq!(a.output(f), b.output(f));
        assert_eq!(
            a.output(f),
            Output::List(vec![Datum::Int(70), Datum::Int(50), Datum::Int(30)])
        );
    }

    #[test]
    fn newest_values_merged_one_by_one_are_those_merged_at_once() {
        let f = Function::LastK(4);
        let mut seed = 11u64;
        let mut next = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            (seed >> 40) as i64 % 30
        };
        let singles: Vec<State> = (0..200)
            .map(|i| State::of(f, Some(&Datum::Int(i)), (next(), 0)).expect("value"))
            .collect();
        let mut one_by_one = singles[0].clone();
        for state in &singles[1..] {
            one_by_one.merge(f, state);
        }
        let all: Vec<(OrderKey, Datum)> = singles
            .iter()
            .flat_map(|s| match s {
                State::Newest(values) => values.clone(),
                _ => Vec::new(),
            })
            .collect();
        let mut at_once = singles[0].clone();
        at_once.merge(f, &State::Newest(all));
        assert_eq!(one_by_one, at_once);
    }

    #[test]
    fn distinct_hashes_are_those_stored_tiles_were_made_with() {
        assert_eq!(
            distinct_hash(&Datum::Float(-0.0)),
            distinct_hash(&Datum::Float(0.0))
        );
        assert_ne!(distinct_hash(&Datum::Int(1)), distinct_hash(&Datum::Int(2)));
        let pinned = [
            distinct_hash(&Datum::Int(42)),
            distinct_hash(&Datum::Text("merchant-7".into())),
            distinct_hash(&Datum::Bool(true)),
        ];
        assert_eq!(
            pinned,
            [
                13_163_110_875_106_803_192,
                12_156_714_094_496_256_988,
                8_849_112_093_580_131_862,
            ]
        );
    }

    #[test]
    fn empty_windows_have_a_value_for_each_function() {
        assert_eq!(empty_output(Function::Count, false), Output::Int(0));
        assert_eq!(empty_output(Function::Sum, true), Output::Float(0.0));
        assert_eq!(empty_output(Function::Max, true), Output::Null);
        assert_eq!(
            empty_output(Function::LastK(5), false),
            Output::List(Vec::new())
        );
    }
}
