//! `serving.feature_logging` against the real binary, Redis and a local Delta table: every
//! entity row `/get-online-features` answered is in the view's logged table once, with the
//! values and statuses of the answer and one request id per request, whether committed by
//! `rollover_interval` or at shutdown; and Feast (`FileSource(file_format=DeltaFormat())`,
//! `get_historical_features`) and `deltalake` read the table back.

use std::time::Duration;

use arrow::array::{Array, AsArray, BinaryArray, Float64Array, Int64Array};
use base64::Engine;
use serde_json::{json, Value};

use crate::common::*;

/// 2026-09-09T10:00:00Z.
const BASE: i64 = 1_789_034_400_000;
const FEATURES: [&str; 4] = [
    "purchases_30d",
    "avg_basket_eur",
    "last_review_score",
    "embedding_id",
];
/// Found (user-1: event 11, user-9: event 19, whose review score is null) and not found.
const USERS: [&str; 3] = ["user-1", "user-9", "user-404"];

async fn get_online_features(project: &Project) -> Value {
    let body = json!({
        "features": FEATURES.iter().map(|f| format!("user_features:{f}")).collect::<Vec<_>>(),
        "entities": {"user_id": USERS},
    });
    let response = feature_connector::tls::http_client()
        .post(project.serving_url("/get-online-features"))
        .json(&body)
        .send()
        .await
        .expect("serving listener");
    assert_eq!(response.status(), 200);
    response.json().await.expect("json answer")
}

async fn logged_rows(project: &Project) -> Option<u64> {
    let (_, metrics) = project.http_get("/metrics").await?;
    metrics.lines().find_map(|line| {
        line.strip_prefix(
            r#"feature_connector_feature_log_rows_total{view="user_features",outcome="logged"} "#,
        )
        .and_then(|n| n.trim().parse().ok())
    })
}

/// One logged row: (request id, user, event time µs, per feature (JSON value, status)).
type Row = (String, String, Option<i64>, Vec<(Value, String)>);
/// An entity row as answered: (user, event time µs, per feature (JSON value, status)).
type EntityRow = (String, Option<i64>, Vec<(Value, String)>);

fn rows_of(batch: &arrow::array::RecordBatch) -> Vec<Row> {
    let text = |name: &str, row: usize| {
        let column = batch.column_by_name(name).expect(name);
        let strings = column.as_string::<i32>();
        strings
            .is_valid(row)
            .then(|| strings.value(row).to_string())
    };
    let events = batch.column_by_name("__event_timestamp").expect("event");
    let events = events.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    (0..batch.num_rows())
        .map(|row| {
            let value = |feature: &str| -> Value {
                let column = batch.column_by_name(feature).expect(feature);
                if column.is_null(row) {
                    return Value::Null;
                }
                match feature {
                    "purchases_30d" => json!(column
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .expect("long")
                        .value(row)),
                    "embedding_id" => json!(base64::engine::general_purpose::STANDARD.encode(
                        column
                            .as_any()
                            .downcast_ref::<BinaryArray>()
                            .expect("bytes")
                            .value(row)
                    )),
                    _ => json!(column
                        .as_any()
                        .downcast_ref::<Float64Array>()
                        .expect("double")
                        .value(row)),
                }
            };
            (
                text("__request_id", row).expect("request id"),
                text("user_id", row).expect("user"),
                events.is_valid(row).then(|| events.value(row)),
                FEATURES
                    .iter()
                    .map(|f| {
                        let status = text(&format!("{f}__status"), row).expect("status");
                        (value(f), status)
                    })
                    .collect(),
            )
        })
        .collect()
}

/// What an answer said per entity row, as logged rows without their request id.
fn answered(answer: &Value) -> Vec<EntityRow> {
    let results = answer["results"].as_array().expect("results");
    (0..USERS.len())
        .map(|row| {
            let user = results[0]["values"][row]
                .as_str()
                .expect("user")
                .to_string();
            let features: Vec<(Value, String)> = (1..=FEATURES.len())
                .map(|column| {
                    let status = results[column]["statuses"][row].as_str().expect("status");
                    (results[column]["values"][row].clone(), status.to_string())
                })
                .collect();
            let event = (features[0].1 != "NOT_FOUND").then(|| {
                let text = results[1]["event_timestamps"][row].as_str().expect("time");
                chrono::DateTime::parse_from_rfc3339(text)
                    .expect("rfc 3339")
                    .timestamp_micros()
            });
            (user, event, features)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_row_is_logged_once_and_feast_reads_the_log() {
    let project = Project::new(&redis_url());
    let prefix = unique("flog");
    project.pipeline(
        "user_features",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    project.serving_extra(
        "  feature_logging:\n    url: file://served\n    views:\n      user_features: 1.0\n    rollover_interval: 1s\n    rollover_rows: 1000",
    );
    // Event i: user-(i % 10), event time BASE + i ms, purchases_30d = 3 i.
    project.produce("user_features", 20, 10, BASE, 0);
    let connector = project.start();
    wait_drained(&project.topic, &["user_features"], Duration::from_secs(60)).await;

    // Three answers committed by the interval, a fourth by the shutdown.
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(get_online_features(&project).await);
    }
    wait_until("3 answers logged", Duration::from_secs(30), || async {
        logged_rows(&project).await == Some(9)
    })
    .await;
    answers.push(get_online_features(&project).await);
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    assert_quiet("feature logging", &log);

    // The logged answers against the offline table at each request's time: the found rows
    // equal the table's, the unknown user is in neither.
    let audit = project.run_command(&[
        "audit",
        "--pipeline",
        "user_features",
        "--served",
        "--sample",
        "all",
        "--json",
    ]);
    let report: Value = serde_json::from_slice(&audit.stdout).unwrap_or_else(|e| {
        panic!(
            "audit --served: {e}: {}",
            String::from_utf8_lossy(&audit.stderr)
        )
    });
    assert_eq!(exit_code(audit.status), 0, "{report:#}");
    let logged = answers.len() * USERS.len();
    assert_eq!(report["entities"], json!(logged), "{report:#}");
    assert_eq!(
        report["outcomes"]["equal"],
        json!(answers.len() * 2),
        "{report:#}"
    );
    assert_eq!(
        report["outcomes"]["absent"],
        json!(answers.len()),
        "{report:#}"
    );
    assert_eq!(report["defects"], json!(0), "{report:#}");

    let served = project.path().join("served");
    let store = format!("file://{}", served.display());
    let mut rows: Vec<Row> = read_table(&store, "user_features")
        .await
        .iter()
        .flat_map(|(_, batch)| rows_of(batch))
        .collect();
    assert_eq!(rows.len(), answers.len() * USERS.len(), "{rows:?}");
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut requests: Vec<Vec<EntityRow>> = rows
        .chunk_by(|a, b| a.0 == b.0)
        .map(|group| {
            group
                .iter()
                .map(|(_, user, event, features)| (user.clone(), *event, features.clone()))
                .collect()
        })
        .collect();
    assert_eq!(requests.len(), answers.len(), "one request id per request");
    let mut expected: Vec<_> = answers
        .iter()
        .map(|answer| {
            let mut rows = answered(answer);
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            rows
        })
        .collect();
    requests.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    expected.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(requests, expected);
    let statuses: Vec<&str> = expected[0]
        .iter()
        .flat_map(|(_, _, f)| f.iter().map(|(_, s)| s.as_str()))
        .collect();
    assert_eq!(
        statuses,
        [
            "PRESENT",
            "PRESENT",
            "PRESENT",
            "PRESENT", // user-1
            "NOT_FOUND",
            "NOT_FOUND",
            "NOT_FOUND",
            "NOT_FOUND", // user-404
            "PRESENT",
            "PRESENT",
            "NULL_VALUE",
            "PRESENT", // user-9
        ]
    );
    assert_eq!(expected[0][0].2[0].0, json!(11 * 3));

    // Third-party readers: delta-rs, and Feast's get_historical_features with the logged
    // keys and request times as the entity dataframe (a training set "as served").
    let table = served.join("user_features");
    let read = crate::offline::read_with_keys(
        "deltalake",
        &table.display().to_string(),
        "__request_id,user_id",
    );
    assert_eq!(read["rows"], json!(12), "{read}");
    assert_eq!(read["distinct_keys"], json!(12), "{read}");
    assert_eq!(
        read["delta_types"]["__log_timestamp"],
        json!("timestamp"),
        "{read}"
    );
    assert_eq!(read["delta_types"]["__log_date"], json!("date"), "{read}");

    let asked_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let spec = json!({
        "table": table.display().to_string(),
        "view": "user_features_served", "ttl_seconds": 0,
        "timestamp_field": "__log_timestamp", "created_timestamp_column": null,
        "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
        "features": [{"name": "purchases_30d", "dtype": "Int64"},
                     {"name": "purchases_30d__status", "dtype": "String"}],
        "entity_rows": USERS.iter().map(|user| json!({
            "user_id": user, "event_timestamp": asked_at
        })).collect::<Vec<_>>(),
    });
    let result = crate::offline::historical_features(project.path(), "served-spec.json", &spec);
    let got: Vec<(Value, Value)> = result["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            (
                row["purchases_30d"].clone(),
                row["purchases_30d__status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (json!(11 * 3), json!("PRESENT")),
            (json!(19 * 3), json!("PRESENT")),
            (Value::Null, json!("NOT_FOUND")),
        ],
        "{result}"
    );
}
