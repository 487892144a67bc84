//! `audit --served`: the log of served features (one row per entity of each
//! `/get-online-features` answer) against the offline table point-in-time at each
//! request's time, the check Chronon's consistency job makes. What was served stands in
//! for the online row; the table's newest row at or before the request time (within the
//! view's TTL, as Feast's point-in-time join) for the offline one; same outcomes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use futures::StreamExt;
use serde_json::Value;

use super::classify::{compare, EntityKey, OfflineRow, OnlineRow};
use super::offline::{feature_values, history_rows, key_columns, required};
use super::report::{AuditReport, ReportHead};
use super::sample::{Offered, Sampler, Selection};
use super::{AuditError, AuditTarget, TableRead};
use crate::delta::read::fold_file;
use crate::delta::{Table, TableLocation};
use crate::record::entity_hash;
use crate::record::event_time_millis;

/// The log table's request-time column.
pub const LOG_TIMESTAMP: &str = "__log_timestamp";
/// The log table's column of the served row's event time.
pub const EVENT_TIMESTAMP: &str = "__event_timestamp";
/// The suffix of a feature's status column.
pub const STATUS_SUFFIX: &str = "__status";

/// One logged answer for one entity.
#[derive(Debug, Clone)]
struct Served {
    request_ms: i64,
    /// What was served; `None` when nothing was (`NOT_FOUND`, `OUTSIDE_MAX_AGE`).
    row: Option<OnlineRow>,
    /// Per feature of the view, whether the request asked for it (its status is set).
    asked: Vec<bool>,
}

type Logged = HashMap<EntityKey, (u64, Vec<Served>)>;

/// Audits the answers logged in `log` for `target`'s view.
pub async fn audit_served(
    target: &AuditTarget,
    log: TableLocation,
    selection: Selection,
) -> Result<AuditReport, AuditError> {
    let started = Instant::now();
    let audited_at_ms = chrono::Utc::now().timestamp_millis();
    let mut sampler = Sampler::new(selection);
    let log_table = Table::open_existing(log).await?;
    let (logged, files_read, rows_read) = read_log(&log_table, target, &mut sampler).await?;
    let until_ms = logged
        .values()
        .flat_map(|(_, rows)| rows.iter().map(|r| r.request_ms))
        .max()
        .unwrap_or(i64::MIN);
    let entities: Arc<HashSet<EntityKey>> = Arc::new(logged.keys().cloned().collect());
    let table = Table::open_existing(target.table.clone()).await?;
    let (history, table_rows) = history_rows(&table, &target.layout, entities, until_ms).await?;
    let ttl_ms = target.ttl_ms();
    let mut tally = target.tally();
    let empty = Vec::new();
    for (entity, (_, answers)) in &logged {
        let events = history.get(entity).unwrap_or(&empty);
        for answer in answers {
            let offline = point_in_time(events, answer.request_ms, ttl_ms);
            let comparison = compare(
                answer.row.as_ref(),
                offline.as_ref(),
                None,
                answer.request_ms,
            )
            .only(&answer.asked);
            tally.add(
                entity,
                &comparison,
                answer.row.as_ref().map(|r| r.event_time_ms),
                offline.as_ref().map(|o| o.event_time_ms),
            );
        }
    }
    Ok(tally.into_report(ReportHead {
        pipeline: target.pipeline.clone(),
        selection: "served",
        read: TableRead {
            version: table.version(),
            files_read,
            files_skipped: 0,
            rows_read: rows_read + table_rows,
        },
        online_keys_scanned: None,
        audited_at_ms,
        started,
    }))
}

/// The table's newest rows at or before `at_ms` and, with a TTL, after `at_ms - ttl`.
fn point_in_time(
    events: &[(i64, Vec<Value>)],
    at_ms: i64,
    ttl_ms: Option<i64>,
) -> Option<OfflineRow> {
    let end = events.partition_point(|(t, _)| *t <= at_ms);
    let (newest, _) = events.get(end.checked_sub(1)?)?;
    if ttl_ms.is_some_and(|ttl| *newest <= at_ms.saturating_sub(ttl)) {
        return None;
    }
    let mut row = OfflineRow {
        event_time_ms: *newest,
        candidates: Vec::new(),
    };
    for (at, values) in events[..end].iter().rev().take_while(|(t, _)| t == newest) {
        row.offer(*at, || values.clone());
    }
    Some(row)
}

/// The logged answers of the sampled entities: (rows per entity, files, rows read).
async fn read_log(
    log: &Table,
    target: &AuditTarget,
    sampler: &mut Sampler,
) -> Result<(Logged, usize, u64), AuditError> {
    let files = log.active_files().await?;
    let files_read = files.len();
    let layout = Arc::new(target.layout.clone());
    let mut columns = layout.keys.clone();
    columns.push(LOG_TIMESTAMP.to_string());
    columns.push(EVENT_TIMESTAMP.to_string());
    for feature in &layout.features {
        columns.push(feature.clone());
        columns.push(format!("{feature}{STATUS_SUFFIX}"));
    }
    let filter = sampler.filter();
    let mut reads = futures::stream::iter(files)
        .map(|file| {
            let (layout, filter) = (layout.clone(), filter.clone());
            fold_file(
                log.store().clone(),
                file.path,
                columns.clone(),
                None,
                Logged::new(),
                move |batch, logged| {
                    logged_in_batch(
                        batch,
                        &layout.keys,
                        &layout.features,
                        |k, h| filter.admits(k, h),
                        logged,
                    )
                },
            )
        })
        .buffer_unordered(4);
    let mut logged = Logged::new();
    let mut rows_read = 0;
    while let Some(read) = reads.next().await {
        let (rows, read) = read?;
        rows_read += read;
        for (key, (hash, mut answers)) in rows {
            match sampler.offer(&key, hash) {
                Offered::Refused => continue,
                Offered::KeptEvicting(evicted) => {
                    logged.remove(&evicted);
                }
                Offered::Kept => {}
            }
            logged
                .entry(key)
                .or_insert((hash, Vec::new()))
                .1
                .append(&mut answers);
        }
    }
    Ok((logged, files_read, rows_read))
}

fn logged_in_batch(
    batch: &RecordBatch,
    keys: &[String],
    features: &[String],
    admits: impl Fn(&EntityKey, u64) -> bool,
    logged: &mut Logged,
) -> Result<(), arrow::error::ArrowError> {
    let key_text = key_columns(batch, keys)?;
    let requested = required(batch, LOG_TIMESTAMP)?;
    let event_time = required(batch, EVENT_TIMESTAMP)?;
    let values: Vec<Option<&ArrayRef>> = features.iter().map(|f| batch.column_by_name(f)).collect();
    let statuses: Vec<Option<&ArrayRef>> = features
        .iter()
        .map(|f| batch.column_by_name(&format!("{f}{STATUS_SUFFIX}")))
        .collect();
    for row in 0..batch.num_rows() {
        let key: EntityKey = key_text.iter().map(|f| f.value(row).to_string()).collect();
        let hash = entity_hash(&key);
        if !admits(&key, hash) {
            continue;
        }
        let Some(request_ms) = event_time_millis(requested, row) else {
            continue;
        };
        let present = statuses.iter().any(|status| is_present(*status, row));
        let asked: Vec<bool> = statuses
            .iter()
            .map(|status| status.is_none_or(|s| !s.is_null(row)))
            .collect();
        let served = event_time_millis(event_time, row)
            .filter(|_| present)
            .map(|event_time_ms| OnlineRow {
                event_time_ms,
                values: feature_values(&values, row),
            });
        logged
            .entry(key)
            .or_insert((hash, Vec::new()))
            .1
            .push(Served {
                request_ms,
                row: served,
                asked,
            });
    }
    Ok(())
}

/// Whether a status column says `PRESENT` at `row` (a log without status columns: served).
fn is_present(status: Option<&ArrayRef>, row: usize) -> bool {
    let Some(status) = status else {
        return true;
    };
    if status.is_null(row) {
        return false;
    }
    match status.data_type() {
        arrow::datatypes::DataType::Utf8 => status.as_string::<i32>().value(row) == "PRESENT",
        arrow::datatypes::DataType::LargeUtf8 => status.as_string::<i64>().value(row) == "PRESENT",
        arrow::datatypes::DataType::Utf8View => status.as_string_view().value(row) == "PRESENT",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_point_in_time_row_is_the_newest_at_or_before_the_request_within_the_ttl() {
        let events = vec![
            (10, vec![json!(1)]),
            (20, vec![json!(2)]),
            (20, vec![json!(3)]),
            (30, vec![json!(4)]),
        ];
        assert_eq!(point_in_time(&events, 5, None), None);
        let at_25 = point_in_time(&events, 25, None).unwrap();
        assert_eq!(at_25.event_time_ms, 20);
        assert_eq!(at_25.candidates.len(), 2);
        assert_eq!(
            point_in_time(&events, 30, None).unwrap().candidates,
            vec![vec![json!(4)]]
        );
        assert_eq!(point_in_time(&events, 45, Some(10)), None);
        assert!(point_in_time(&events, 35, Some(10)).is_some());
    }
}
