//! The feature log without a store: what a full queue does, and served rows as table rows.

use std::time::Duration;

use arrow::array::{
    Array, AsArray, BinaryArray, Float32Array, Int32Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Int64Type};

use super::rows::{log_schema, to_batch};
use super::*;
use crate::aggregate::{Datum, Output};
use crate::redis::LayoutKind;
use crate::serving::FeatureLoggingConfig;

fn view() -> FeatureView {
    let list = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
    FeatureView {
        name: "users".into(),
        prefix: "fc".into(),
        keys: vec![("user_id".into(), DataType::Utf8)],
        features: vec![
            ("clicks".into(), DataType::Int64),
            ("ctr".into(), DataType::Float32),
            ("days".into(), DataType::Int32),
            ("blob".into(), DataType::Binary),
            ("counts".into(), list),
        ],
        layout: LayoutKind::Native,
        project: "p".into(),
        ttl: Some(Duration::from_secs(60)),
        tiles: None,
    }
}

fn config(queue_rows: usize) -> FeatureLoggingConfig {
    serde_saphyr::from_str(&format!(
        "url: memory:///log\nviews:\n  users: 1.0\nrollover_rows: 1\nqueue_rows: {queue_rows}\n"
    ))
    .unwrap()
}

fn lookup<'v>(view: &'v FeatureView, users: &[&str]) -> Lookup<'v> {
    Lookup {
        view,
        features: vec![0, 1],
        entities: users.iter().map(|u| vec![(*u).to_string()]).collect(),
    }
}

fn found(rows: usize) -> Vec<Vec<Found>> {
    vec![(0..rows)
        .map(|i| Found::read(Some(1_000), vec![Some(i.to_string().into_bytes()), None]))
        .collect()]
}

fn statuses(rows: usize) -> Vec<Vec<&'static str>> {
    vec![vec!["PRESENT"; rows], vec!["NULL_VALUE"; rows]]
}

#[test]
fn a_full_queue_drops_and_counts_rows_instead_of_waiting() {
    let metrics = Metrics::new();
    let views = [view()];
    let (log, mut receiver) = FeatureLog::new(&config(3), &views, &metrics).unwrap();
    let view = &views[0];
    // Nobody takes rows: the first two fit, the next two do not, one more fits.
    log.offer(vec![lookup(view, &["u1", "u2"])], found(2), statuses(2), 1);
    log.offer(vec![lookup(view, &["u3", "u4"])], found(2), statuses(2), 2);
    log.offer(vec![lookup(view, &["u5"])], found(1), statuses(1), 3);
    let counter = |outcome| {
        metrics
            .consistency
            .feature_log_rows
            .get_or_create(&FeatureLogLabels {
                view: "users".into(),
                outcome,
            })
            .get()
    };
    assert_eq!(counter("dropped"), 2);
    assert_eq!(counter("logged"), 0);
    let first = receiver.try_recv().unwrap();
    assert_eq!(first.rows.len(), 2);
    assert_eq!(receiver.try_recv().unwrap().log_time_us, 3);
    assert!(receiver.try_recv().is_err());

    // Committed rows give their room back.
    log.shared.release(3);
    log.offer(
        vec![lookup(view, &["u6", "u7", "u8"])],
        found(3),
        statuses(3),
        4,
    );
    assert_eq!(receiver.try_recv().unwrap().rows.len(), 3);
    // The writer gone: rows are dropped and counted, never queued.
    drop(receiver);
    log.shared.release(3);
    log.offer(vec![lookup(view, &["u9"])], found(1), statuses(1), 5);
    assert_eq!(counter("dropped"), 3);
}

#[test]
fn served_rows_become_typed_table_rows_with_their_statuses() {
    let view = view();
    let schema = log_schema(&view).unwrap();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "__log_timestamp",
            "__log_date",
            "__request_id",
            "user_id",
            "__event_timestamp",
            "clicks",
            "clicks__status",
            "ctr",
            "ctr__status",
            "days",
            "days__status",
            "blob",
            "blob__status",
            "counts",
            "counts__status",
        ]
    );
    // 2026-09-09T10:00:00Z.
    let now_us = 1_789_034_400_000_000;
    let request = LoggedRequest {
        view: 0,
        request_id: Arc::from("r-1"),
        log_time_us: now_us,
        // Asked: counts, clicks, blob (not ctr, not days).
        features: vec![4, 0, 3],
        statuses: vec![
            vec!["PRESENT", "NOT_FOUND"],
            vec!["OUTSIDE_MAX_AGE", "NOT_FOUND"],
            vec!["PRESENT", "NOT_FOUND"],
        ],
        rows: vec![
            LoggedRow {
                index: 0,
                keys: vec!["u1".into()],
                found: Found::read(
                    Some(1_789_000_000_123),
                    vec![
                        Some(b"[1, -2]".to_vec()),
                        Some(b"42".to_vec()),
                        Some(vec![0, 255]),
                    ],
                ),
            },
            LoggedRow {
                index: 1,
                keys: vec!["u2".into()],
                found: Found::read(None, vec![None, None, None]),
            },
        ],
    };
    let batch = to_batch(&view, &schema, &[request]).unwrap();
    assert_eq!(batch.num_rows(), 2);
    let column = |name: &str| batch.column_by_name(name).unwrap().clone();
    let times = column("__log_timestamp");
    let times = times
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(times.value(1), now_us);
    let days = column("__log_date");
    assert_eq!(
        days.as_primitive::<arrow::datatypes::Date32Type>().value(0),
        20_706
    );
    let events = column("__event_timestamp");
    let events = events
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(events.value(0), 1_789_000_000_123_000);
    assert!(events.is_null(1));
    let clicks = column("clicks");
    let clicks = clicks.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!((clicks.value(0), clicks.is_null(1)), (42, true));
    let text = |name: &str| -> Vec<Option<String>> {
        let array = column(name);
        let strings = array.as_any().downcast_ref::<StringArray>().unwrap();
        strings.iter().map(|v| v.map(str::to_string)).collect()
    };
    assert_eq!(
        text("clicks__status"),
        [Some("OUTSIDE_MAX_AGE".into()), Some("NOT_FOUND".into())]
    );
    assert_eq!(
        text("__request_id"),
        [Some("r-1".into()), Some("r-1".into())]
    );
    // Features not asked: no value, no status.
    assert_eq!(text("ctr__status"), [None, None]);
    assert!(column("ctr")
        .as_any()
        .downcast_ref::<Float32Array>()
        .unwrap()
        .is_null(0));
    assert!(column("days")
        .as_any()
        .downcast_ref::<Int32Array>()
        .unwrap()
        .is_null(0));
    let blob = column("blob");
    assert_eq!(
        blob.as_any()
            .downcast_ref::<BinaryArray>()
            .unwrap()
            .value(0),
        [0, 255]
    );
    let counts = column("counts");
    let first = counts.as_list::<i32>().value(0);
    assert_eq!(first.as_primitive::<Int64Type>().values(), &[1, -2]);
    assert!(counts.is_null(1));
}

#[test]
fn aggregated_features_are_logged_as_the_answer_worked_them_out() {
    let view = view();
    let schema = log_schema(&view).unwrap();
    // An entity with tiles and no stored row: its aggregated features still have values.
    let mut found = Found::read(None, vec![None, None]);
    found.set_aggregated(vec![
        Some(Output::List(vec![Datum::Int(3), Datum::Int(4)])),
        Some(Output::Int(7)),
    ]);
    let mut empty = Found::read(None, vec![None, None]);
    empty.set_aggregated(vec![Some(Output::List(Vec::new())), Some(Output::Null)]);
    let request = LoggedRequest {
        view: 0,
        request_id: Arc::from("r-2"),
        log_time_us: 1_789_034_400_000_000,
        // Asked: counts, clicks, both worked out from tiles here.
        features: vec![4, 0],
        statuses: vec![vec!["PRESENT", "PRESENT"], vec!["PRESENT", "PRESENT"]],
        rows: vec![
            LoggedRow {
                index: 0,
                keys: vec!["u1".into()],
                found,
            },
            LoggedRow {
                index: 1,
                keys: vec!["u2".into()],
                found: empty,
            },
        ],
    };
    let batch = to_batch(&view, &schema, &[request]).unwrap();
    let clicks = batch.column_by_name("clicks").unwrap();
    let clicks = clicks.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!((clicks.value(0), clicks.is_null(1)), (7, true));
    let counts = batch
        .column_by_name("counts")
        .unwrap()
        .as_list::<i32>()
        .clone();
    assert_eq!(
        counts.value(0).as_primitive::<Int64Type>().values(),
        &[3, 4]
    );
    assert_eq!(counts.value(1).len(), 0, "an empty last_k is an empty list");
}
