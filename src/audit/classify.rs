//! Per entity, what the online store holds against the table's newest committed row, in
//! the order latest-wins uses (event time; at equal event times the online store keeps the
//! last write, so any of the table's rows at that time may be the one it holds).

use serde::Serialize;
use serde_json::Value;

use super::values::{as_number, symmetric_error};

/// An entity: its join key values as text, in the view's key order.
pub type EntityKey = Vec<String>;

/// What the online store holds for an entity.
#[derive(Debug, Clone, PartialEq)]
pub struct OnlineRow {
    /// Event time of the stored values, epoch ms.
    pub event_time_ms: i64,
    /// Per stored (plain) feature of the view, its value (null when the field is not there).
    pub values: Vec<Value>,
}

/// The table's newest rows of an entity.
#[derive(Debug, Clone, PartialEq)]
pub struct OfflineRow {
    /// The greatest event time among the entity's rows, epoch ms.
    pub event_time_ms: i64,
    /// The distinct feature values of the rows at that event time.
    pub candidates: Vec<Vec<Value>>,
}

impl OfflineRow {
    /// Takes a row of the entity: newer replaces, as new as adds a candidate.
    pub fn offer(&mut self, event_time_ms: i64, values: impl FnOnce() -> Vec<Value>) {
        if event_time_ms > self.event_time_ms {
            self.event_time_ms = event_time_ms;
            self.candidates = vec![values()];
        } else if event_time_ms == self.event_time_ms {
            let values = values();
            if !self.candidates.contains(&values) {
                self.candidates.push(values);
            }
        }
    }

    /// Takes every row of `other` (the same entity, read from another file).
    pub fn merge(&mut self, other: OfflineRow) {
        for candidate in other.candidates {
            self.offer(other.event_time_ms, || candidate);
        }
    }
}

/// What the audit concludes for one entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Same event time, same values.
    Equal,
    /// The online value is newer than the table's: not committed yet (expected within a
    /// rollover).
    OnlineAhead,
    /// The table holds a newer value than the online store: online missed it (defect).
    TableAhead,
    /// Same event time, different values (defect).
    Skew,
    /// In the table, not online, and its newest event is within the TTL (defect).
    MissingOnline,
    /// In the table, not online, and its newest event is older than the TTL (expected).
    ExpiredOnline,
    /// Online, not in the table (not committed yet, or written by something else).
    MissingOffline,
    /// In neither store (only for entities named by the caller).
    Absent,
}

impl Outcome {
    /// Every outcome, in report order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Equal,
        Outcome::OnlineAhead,
        Outcome::TableAhead,
        Outcome::Skew,
        Outcome::MissingOnline,
        Outcome::ExpiredOnline,
        Outcome::MissingOffline,
        Outcome::Absent,
    ];

    /// The outcome's name in reports and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Equal => "equal",
            Outcome::OnlineAhead => "online_ahead",
            Outcome::TableAhead => "table_ahead",
            Outcome::Skew => "skew",
            Outcome::MissingOnline => "missing_online",
            Outcome::ExpiredOnline => "expired_online",
            Outcome::MissingOffline => "missing_offline",
            Outcome::Absent => "absent",
        }
    }

    /// Whether the outcome means a store is wrong (the audit then fails).
    pub fn is_defect(self) -> bool {
        matches!(
            self,
            Outcome::TableAhead | Outcome::Skew | Outcome::MissingOnline
        )
    }
}

/// One entity compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The outcome.
    pub outcome: Outcome,
    /// For online ahead: how far the table's newest event time is behind, ms.
    pub lag_ms: Option<i64>,
    /// Compared at the same event time: per feature, whether the values are equal, and
    /// the pair's numeric error when both are numbers.
    pub features: Vec<FeatureComparison>,
}

/// One feature of an entity compared at the same event time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeatureComparison {
    /// Whether the feature was compared at all (a served answer holds only the features its
    /// request asked for).
    pub compared: bool,
    /// Whether online and offline hold the same value.
    pub equal: bool,
    /// Their symmetric absolute percentage error, for finite numbers.
    pub error: Option<f64>,
}

impl FeatureComparison {
    /// A feature not compared (it counts as neither compared nor differing).
    pub fn not_compared() -> Self {
        FeatureComparison {
            compared: false,
            equal: true,
            error: None,
        }
    }
}

impl Comparison {
    /// Leaves out the features not in `asked` (a served answer's features not requested):
    /// they count as neither compared nor differing, and a skew only in them is no skew.
    pub fn only(mut self, asked: &[bool]) -> Self {
        for (feature, asked) in self.features.iter_mut().zip(asked) {
            if !asked {
                *feature = FeatureComparison::not_compared();
            }
        }
        if self.outcome == Outcome::Skew && self.features.iter().all(|f| f.equal) {
            self.outcome = Outcome::Equal;
        }
        self
    }
}

/// Whether two values read from the stores are the same value.
pub fn same_value(a: &Value, b: &Value) -> bool {
    if a == b {
        return true;
    }
    match (as_number(a), as_number(b)) {
        (Some(x), Some(y)) => x == y || (x.is_nan() && y.is_nan()),
        _ => false,
    }
}

fn compare_features(online: &[Value], offline: &[Value]) -> Vec<FeatureComparison> {
    online
        .iter()
        .zip(offline)
        .map(|(a, b)| FeatureComparison {
            compared: true,
            equal: same_value(a, b),
            error: as_number(a)
                .zip(as_number(b))
                .and_then(|(x, y)| symmetric_error(x, y)),
        })
        .collect()
}

/// How far apart a candidate is: its mismatches, then their summed numeric error.
fn closeness(features: &[FeatureComparison]) -> f64 {
    features
        .iter()
        .filter(|f| !f.equal)
        .map(|f| 1.0 + f.error.unwrap_or(2.0) / 4.0)
        .sum()
}

/// Compares an entity's online row with the table's newest rows; `ttl_ms` is the online
/// sink's TTL and `now_ms` the time the stores were read.
pub fn compare(
    online: Option<&OnlineRow>,
    offline: Option<&OfflineRow>,
    ttl_ms: Option<i64>,
    now_ms: i64,
) -> Comparison {
    let verdict = |outcome, lag_ms| Comparison {
        outcome,
        lag_ms,
        features: Vec::new(),
    };
    match (online, offline) {
        (None, None) => verdict(Outcome::Absent, None),
        (Some(_), None) => verdict(Outcome::MissingOffline, None),
        (None, Some(table)) => {
            let expired =
                ttl_ms.is_some_and(|ttl| table.event_time_ms.saturating_add(ttl) <= now_ms);
            verdict(
                if expired {
                    Outcome::ExpiredOnline
                } else {
                    Outcome::MissingOnline
                },
                None,
            )
        }
        (Some(online), Some(table)) if online.event_time_ms > table.event_time_ms => verdict(
            Outcome::OnlineAhead,
            Some(online.event_time_ms - table.event_time_ms),
        ),
        (Some(online), Some(table)) if online.event_time_ms < table.event_time_ms => {
            verdict(Outcome::TableAhead, None)
        }
        (Some(online), Some(table)) => {
            // The candidate closest to the online row explains it best.
            let best = table
                .candidates
                .iter()
                .map(|candidate| compare_features(&online.values, candidate))
                .min_by(|a, b| closeness(a).total_cmp(&closeness(b)))
                .unwrap_or_default();
            let outcome = if best.iter().all(|f| f.equal) {
                Outcome::Equal
            } else {
                Outcome::Skew
            };
            Comparison {
                outcome,
                lag_ms: None,
                features: best,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn online(at: i64, values: Vec<Value>) -> OnlineRow {
        OnlineRow {
            event_time_ms: at,
            values,
        }
    }

    fn table(at: i64, candidates: Vec<Vec<Value>>) -> OfflineRow {
        OfflineRow {
            event_time_ms: at,
            candidates,
        }
    }

    #[test]
    fn every_class_is_told_apart() {
        let now = 1_000_000;
        let on = online(100, vec![json!(1), json!("a")]);
        let same = table(100, vec![vec![json!(1), json!("a")]]);
        assert_eq!(
            compare(Some(&on), Some(&same), None, now).outcome,
            Outcome::Equal
        );
        let older = table(40, vec![vec![json!(0), json!("a")]]);
        let ahead = compare(Some(&on), Some(&older), None, now);
        assert_eq!(
            (ahead.outcome, ahead.lag_ms),
            (Outcome::OnlineAhead, Some(60))
        );
        let newer = table(200, vec![vec![json!(2), json!("b")]]);
        assert_eq!(
            compare(Some(&on), Some(&newer), None, now).outcome,
            Outcome::TableAhead
        );
        let other = table(100, vec![vec![json!(1), json!("z")]]);
        let skew = compare(Some(&on), Some(&other), None, now);
        assert_eq!(skew.outcome, Outcome::Skew);
        assert_eq!(
            skew.features.iter().map(|f| f.equal).collect::<Vec<_>>(),
            [true, false]
        );
        assert_eq!(
            compare(Some(&on), None, None, now).outcome,
            Outcome::MissingOffline
        );
        assert_eq!(
            compare(None, Some(&same), None, now).outcome,
            Outcome::MissingOnline
        );
        assert_eq!(
            compare(None, Some(&same), Some(10), now).outcome,
            Outcome::ExpiredOnline
        );
        assert_eq!(
            compare(None, Some(&same), Some(10_000_000), now).outcome,
            Outcome::MissingOnline
        );
        assert_eq!(compare(None, None, None, now).outcome, Outcome::Absent);
        assert!(Outcome::ALL.iter().filter(|o| o.is_defect()).count() == 3);
    }

    #[test]
    fn at_a_tied_event_time_any_of_the_tables_rows_may_be_the_online_one() {
        let mut rows = table(100, vec![vec![json!(1.5)]]);
        rows.offer(100, || vec![json!(2.5)]);
        rows.offer(90, || vec![json!(9.0)]);
        assert_eq!(rows.candidates.len(), 2);
        let on = online(100, vec![json!(2.5)]);
        assert_eq!(
            compare(Some(&on), Some(&rows), None, 0).outcome,
            Outcome::Equal
        );
        let off = online(100, vec![json!(3.0)]);
        let skew = compare(Some(&off), Some(&rows), None, 0);
        assert_eq!(skew.outcome, Outcome::Skew);
        assert_eq!(
            skew.features[0].error.map(|e| (e * 1000.0).round()),
            Some(182.0)
        );
    }

    #[test]
    fn features_a_request_did_not_ask_for_are_not_compared() {
        let served = online(100, vec![json!(1), Value::Null]);
        let table_row = table(100, vec![vec![json!(1), json!("x")]]);
        let full = compare(Some(&served), Some(&table_row), None, 0);
        assert_eq!(full.outcome, Outcome::Skew);
        let asked = full.only(&[true, false]);
        assert_eq!(asked.outcome, Outcome::Equal);
        assert!(!asked.features[1].compared);
    }

    #[test]
    fn newer_rows_replace_and_merging_files_keeps_the_newest() {
        let mut a = table(10, vec![vec![json!(1)]]);
        a.offer(20, || vec![json!(2)]);
        a.merge(table(20, vec![vec![json!(3)]]));
        a.merge(table(5, vec![vec![json!(0)]]));
        assert_eq!(a, table(20, vec![vec![json!(2)], vec![json!(3)]]));
        assert!(same_value(&json!(1), &json!(1.0)));
        assert!(same_value(&json!("NaN"), &json!("NaN")));
        assert!(!same_value(&json!(null), &json!(0)));
    }
}
