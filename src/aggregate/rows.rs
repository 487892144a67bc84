//! A batch's rows as the aggregations' events: one event per aggregation per row, each
//! with its column's value. The online tiles and the training sets both read rows through
//! here, so they agree on what an event is (a count's present value, the tie-break).

use std::borrow::Borrow;

use arrow::array::ArrayRef;
use arrow::error::ArrowError;

use super::column::ColumnValues;
use super::config::Aggregation;
use super::function::Datum;
use super::tiles::Event;

/// Per aggregation, its column's values in a batch (`None`: a count of events).
pub struct AggregatedColumns(Vec<Option<ColumnValues>>);

impl AggregatedColumns {
    /// The columns `aggregations` read, found by name with `column`.
    pub fn read<A: Borrow<ArrayRef>>(
        aggregations: &[Aggregation],
        column: impl Fn(&str) -> Result<A, ArrowError>,
    ) -> Result<Self, ArrowError> {
        let arrays = aggregations
            .iter()
            .map(|a| {
                a.column
                    .as_deref()
                    .map(|c| Ok(column(c)?.borrow().clone()))
                    .transpose()
            })
            .collect::<Result<Vec<_>, ArrowError>>()?;
        Self::of_arrays(&arrays)
    }

    /// Per aggregation its column's values (`None`: a count of events).
    pub fn of_arrays(arrays: &[Option<ArrayRef>]) -> Result<Self, ArrowError> {
        arrays
            .iter()
            .map(|array| array.as_ref().map(ColumnValues::of).transpose())
            .collect::<Result<Vec<_>, _>>()
            .map(AggregatedColumns)
    }

    /// How many aggregations.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `true` for no aggregation.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values of the aggregation at `aggregation` as an Arrow array (`None`: a count, or
    /// no such aggregation).
    pub fn array(&self, aggregation: usize) -> Option<&dyn arrow::array::Array> {
        self.0.get(aggregation)?.as_ref().map(ColumnValues::array)
    }

    /// Row `row`'s event for each aggregation; ties of event time in `last_k` are broken by
    /// the publish time.
    pub fn events(&self, row: usize, event_time: i64, publish_time: i64) -> Vec<Event> {
        (0..self.0.len())
            .map(|aggregation| self.event(aggregation, row, event_time, publish_time))
            .collect()
    }

    /// Row `row`'s event for the aggregation at `aggregation` (a count's event when there
    /// is no such aggregation).
    pub fn event(
        &self,
        aggregation: usize,
        row: usize,
        event_time: i64,
        publish_time: i64,
    ) -> Event {
        Event {
            event_time,
            publish_time,
            value: match self.0.get(aggregation) {
                Some(Some(values)) => values.datum(row),
                _ => Some(Datum::Bool(true)),
            },
            tie_break: u64::try_from(publish_time).unwrap_or(0),
        }
    }
}

/// How far back the windows of `aggregations` reach from a read: the longest window plus
/// its hop.
pub fn longest_reach_ms(aggregations: &[Aggregation]) -> i64 {
    aggregations
        .iter()
        .map(|a| a.spec.longest_reach_ms())
        .max()
        .unwrap_or(0)
}

/// The longest hop the windows of `aggregations` use.
pub fn longest_hop_ms(aggregations: &[Aggregation]) -> i64 {
    aggregations
        .iter()
        .flat_map(|a| a.spec.retention_by_hop().iter().map(|(hop, _)| *hop))
        .max()
        .unwrap_or(0)
}
