//! Aggregated features in an audit. Only entities whose newest row agrees in both stores
//! (outcome `equal`) are compared: every event up to that row reached both. Their tiles are
//! read and merged at one time `t`, the same features are worked out from the table's
//! events published by `t` (the training-set computation), and then their rows are read
//! again: an entity whose row changed meanwhile got an event during the audit and is left
//! out as in flight. Floats agree within 1e-9 relative, everything else exactly; an
//! entity with a differing aggregated feature is a skew.

use super::classify::{EntityKey, FeatureComparison};
use super::online::read_rows;
use super::values::symmetric_error;
use super::{AuditError, AuditTarget};
use crate::aggregate::{Datum, Output};
use crate::delta::Table;
use crate::serving::{FeatureReader, Lookup};
use crate::training::{spine::KEY_SEPARATOR, values_at, EventSource};

/// Entities per pipelined read of tiles.
const ENTITIES_PER_READ: usize = 1_000;
/// Relative difference below which two floats are the same value.
const FLOAT_TOLERANCE: f64 = 1e-9;

/// For each of `agreed` (entities whose newest row, at the event time beside each, agrees
/// in both stores), its aggregated features compared online and in the table, in the
/// view's order; `None` for an entity an event reached during the audit.
pub async fn compare_aggregated(
    target: &AuditTarget,
    source: &EventSource,
    reader: &FeatureReader,
    agreed: &[(EntityKey, i64)],
) -> Result<Vec<Option<Vec<FeatureComparison>>>, AuditError> {
    let view = &target.view;
    let plain = view.plain_features();
    let aggregated = view.features.len() - plain;
    if agreed.is_empty() || aggregated == 0 {
        return Ok(vec![None; agreed.len()]);
    }
    let entities: Vec<EntityKey> = agreed.iter().map(|(key, _)| key.clone()).collect();
    let at = chrono::Utc::now().timestamp_millis();
    let mut online: Vec<Vec<Option<Output>>> = Vec::with_capacity(entities.len());
    for chunk in entities.chunks(ENTITIES_PER_READ) {
        let lookup = Lookup {
            view,
            features: (plain..view.features.len()).collect(),
            entities: chunk.to_vec(),
        };
        let found = reader.lookup_at(std::slice::from_ref(&lookup), at).await?;
        for row in found.into_iter().next().unwrap_or_default() {
            online.push(
                (0..aggregated)
                    .map(|i| row.aggregated(i).cloned())
                    .collect(),
            );
        }
    }
    let table = Table::open_existing(target.table.clone()).await?;
    let keys: Vec<String> = entities.iter().map(|k| k.join(KEY_SEPARATOR)).collect();
    let offline = values_at(&table, source, &keys, &vec![at; keys.len()]).await?;
    let rows_now = read_rows(reader, view, &entities).await?;
    Ok(agreed
        .iter()
        .zip(&online)
        .zip(&offline.values)
        .zip(&rows_now)
        .map(|((((_, event_time), online), offline), now)| {
            if now.as_ref().map(|row| row.event_time_ms) != Some(*event_time) {
                return None;
            }
            Some(
                online
                    .iter()
                    .zip(offline.iter().flatten())
                    .map(|(online, offline)| FeatureComparison {
                        compared: true,
                        equal: online.as_ref().is_some_and(|o| same_output(o, offline)),
                        error: online
                            .as_ref()
                            .and_then(number)
                            .zip(number(offline))
                            .and_then(|(x, y)| symmetric_error(x, y)),
                    })
                    .collect(),
            )
        })
        .collect())
}

fn number(output: &Output) -> Option<f64> {
    match output {
        Output::Int(i) => Some(*i as f64),
        Output::Float(f) => Some(*f),
        Output::Null | Output::List(_) => None,
    }
}

fn same_float(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= FLOAT_TOLERANCE * a.abs().max(b.abs()) || (a.is_nan() && b.is_nan())
}

fn same_datum(a: &Datum, b: &Datum) -> bool {
    match (a, b) {
        (Datum::Float(a), Datum::Float(b)) => same_float(*a, *b),
        _ => a == b,
    }
}

/// Whether two values of one aggregated feature are the same value.
fn same_output(a: &Output, b: &Output) -> bool {
    match (a, b) {
        (Output::Float(a), Output::Float(b)) => same_float(*a, *b),
        (Output::List(a), Output::List(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_datum(a, b))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_agree_within_their_tolerance_and_the_rest_exactly() {
        assert!(same_output(
            &Output::Float(1.0),
            &Output::Float(1.0 + 1e-12)
        ));
        assert!(!same_output(&Output::Float(1.0), &Output::Float(1.001)));
        assert!(same_output(&Output::Int(3), &Output::Int(3)));
        assert!(!same_output(&Output::Int(3), &Output::Int(4)));
        assert!(same_output(&Output::Null, &Output::Null));
        assert!(!same_output(&Output::Null, &Output::Float(0.0)));
        let list =
            |v: &[&str]| Output::List(v.iter().map(|s| Datum::Text(s.to_string())).collect());
        assert!(same_output(&list(&["a", "b"]), &list(&["a", "b"])));
        assert!(!same_output(&list(&["a", "b"]), &list(&["b", "a"])));
        assert!(!same_output(&list(&["a"]), &list(&["a", "b"])));
    }
}
