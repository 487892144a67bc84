//! Coverage of reads: per view, how many entity rows were answered with a value
//! (`PRESENT`), with none (`NOT_FOUND`) or with one past its max age (`OUTSIDE_MAX_AGE`),
//! counted in `serving_rows_total`. Rows are tallied per request and counted once per view
//! and status, not once per entity.

use super::{FeatureView, Found, Lookup};
use crate::metrics::Metrics;

/// A row with a value within its view's max age.
pub const PRESENT: &str = "PRESENT";
/// A row Redis holds nothing for in the view (never written, or expired).
pub const NOT_FOUND: &str = "NOT_FOUND";
/// A row whose event time is older than its view's `online.ttl`.
pub const OUTSIDE_MAX_AGE: &str = "OUTSIDE_MAX_AGE";

/// One view's rows of one request, by status.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RowTally {
    /// Rows with a value within the view's max age.
    pub present: u64,
    /// Rows with nothing stored.
    pub not_found: u64,
    /// Rows with a value older than the view's max age.
    pub outside_max_age: u64,
}

impl RowTally {
    /// Tallies what Redis held for `view`'s rows, judging ages against `now_ms` as Feast's
    /// answer does (a row is past its max age when its event time is).
    pub fn of(view: &FeatureView, rows: &[Found], now_ms: i64) -> Self {
        let max_age_ms = view
            .ttl
            .map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let mut tally = Self::default();
        for row in rows {
            match (row.event_time_ms, max_age_ms) {
                (None, _) => tally.not_found += 1,
                (Some(t), Some(max)) if now_ms.saturating_sub(t) > max => {
                    tally.outside_max_age += 1;
                }
                (Some(_), _) => tally.present += 1,
            }
        }
        tally
    }

    /// Counts the tally under `view` in `serving_rows_total`.
    pub fn record(&self, metrics: &Metrics, view: &str) {
        let served = &metrics.consistency;
        served.served(view, PRESENT, self.present);
        served.served(view, NOT_FOUND, self.not_found);
        served.served(view, OUTSIDE_MAX_AGE, self.outside_max_age);
    }
}

/// Counts the rows of a `/get-online-features` answer: `found` holds, per lookup of
/// `lookups`, what Redis held for each row.
pub fn count_feast_rows(
    metrics: &Metrics,
    lookups: &[Lookup<'_>],
    found: &[Vec<Found>],
    now_ms: i64,
) {
    for (lookup, rows) in lookups.iter().zip(found) {
        RowTally::of(lookup.view, rows, now_ms).record(metrics, &lookup.view.name);
    }
}

/// Counts the rows of a `/v1/features` answer for `view`: `found` rows as present, the
/// others as not found (this API has no max age).
pub fn count_v1_rows(metrics: &Metrics, view: &str, found: u64, rows: u64) {
    RowTally {
        present: found,
        not_found: rows.saturating_sub(found),
        outside_max_age: 0,
    }
    .record(metrics, view);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::redis::LayoutKind;

    fn view(ttl: Option<Duration>) -> FeatureView {
        FeatureView {
            name: "users".into(),
            prefix: "fc".into(),
            keys: vec![("user_id".into(), arrow::datatypes::DataType::Utf8)],
            features: vec![("clicks".into(), arrow::datatypes::DataType::Int64)],
            layout: LayoutKind::Native,
            project: "p".into(),
            ttl,
            tiles: None,
        }
    }

    fn rows(times: &[Option<i64>]) -> Vec<Found> {
        times
            .iter()
            .map(|&time| Found::read(time, vec![None]))
            .collect()
    }

    #[test]
    fn rows_are_present_missing_or_past_their_max_age() {
        let now = 1_000_000;
        let found = rows(&[
            Some(now - 1_000),
            None,
            Some(now - 120_000),
            Some(now),
            None,
        ]);
        let with_ttl = RowTally::of(&view(Some(Duration::from_secs(60))), &found, now);
        assert_eq!(
            with_ttl,
            RowTally {
                present: 2,
                not_found: 2,
                outside_max_age: 1
            }
        );
        let without = RowTally::of(&view(None), &found, now);
        assert_eq!((without.present, without.outside_max_age), (3, 0));
    }

    #[test]
    fn a_request_counts_once_per_view_and_status() {
        let metrics = Metrics::new();
        let users = view(None);
        let lookups = [Lookup {
            view: &users,
            features: vec![0],
            entities: vec![vec!["u1".into()], vec!["u2".into()], vec!["u3".into()]],
        }];
        let found = [rows(&[Some(1), None, Some(2)])];
        count_feast_rows(&metrics, &lookups, &found, 10);
        count_v1_rows(&metrics, "users", 1, 4);
        let text = metrics.encode();
        for series in [
            r#"feature_connector_serving_rows_total{view="users",status="PRESENT"} 3"#,
            r#"feature_connector_serving_rows_total{view="users",status="NOT_FOUND"} 4"#,
        ] {
            assert!(text.contains(series), "{series} not in {text}");
        }
        assert!(!text.contains(OUTSIDE_MAX_AGE), "{text}");
    }
}
