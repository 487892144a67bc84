//! Training data through Feast: `get_historical_features` over the offline Delta table
//! (`FileSource(file_format=DeltaFormat())`, Feast's duckdb offline store, which follows the
//! table's log) returns point-in-time correct values, for a `long` millisecond event time and
//! for a `timestamp-millis` one.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

/// 2026-09-09T10:00:00Z.
const BASE: i64 = 1_789_034_400_000;
const EVENTS: u64 = 200;
const ENTITIES: u64 = 10;

/// Feast's `get_historical_features` (tests/feast/historical_delta.py) over the Delta table
/// and entity rows of `spec`, written to `dir/<spec_file>`, with a Feast repo in
/// `dir/feast-repo`: `{"rows": […], …}`.
pub fn historical_features(dir: &Path, spec_file: &str, spec: &Value) -> Value {
    let spec_path = dir.join(spec_file);
    std::fs::write(&spec_path, spec.to_string()).expect("spec");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(crate::offline::delta::delta_python())
        .arg(root.join("tests/feast/historical_delta.py"))
        .arg("--repo-dir")
        .arg(dir.join("feast-repo"))
        .arg("--spec")
        .arg(&spec_path)
        .output()
        .expect("run historical_delta.py");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("json")
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

async fn point_in_time(event_time_type: &str, name: &str) {
    let project = Project::new(&redis_url());
    let schema = include_str!("../../../schemas/user_profile.avsc").replacen(
        r#"{"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}}"#,
        &format!(r#"{{"name": "event_time", "type": {event_time_type}}}"#),
        1,
    );
    project.schema_file(&format!("{name}.avsc"), &schema);
    project.pipeline_with_schema(
        name,
        &format!("  file: schemas/{name}.avsc"),
        "online:\n  enabled: false",
        "offline:\n  url: file://offline\n  rollover_rows: 70\n  rollover_interval: 1s",
    );
    // Event i: entity user-(i % 10), event time BASE + i ms, purchases_30d = 3 i.
    project.produce(name, EVENTS, ENTITIES, BASE, 0);
    let connector = project.start();
    wait_drained(&project.topic, &[name], Duration::from_secs(60)).await;
    assert_eq!(connector.stop(), 0);

    // Asked at: before any event, exactly at an event, between events, after the last.
    let asks: Vec<(u64, i64)> = vec![(3, -1), (3, 3), (3, 12), (7, 107), (0, 5_000), (9, 198)];
    let expected: Vec<Value> = asks
        .iter()
        .map(|&(entity, at_ms)| {
            let newest = (0..EVENTS)
                .filter(|i| i % ENTITIES == entity && *i as i64 <= at_ms)
                .max();
            newest.map_or(Value::Null, |i| json!(i * 3))
        })
        .collect();
    let table = project.path().join("offline").join(name);
    let spec = json!({
        "table": table.display().to_string(),
        "view": name, "ttl_seconds": 0, "timestamp_field": "event_time",
        "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
        "features": [{"name": "purchases_30d", "dtype": "Int64"}, {"name": "sessions_7d", "dtype": "Int32"}],
        "entity_rows": asks.iter().map(|(entity, at)| json!({
            "user_id": format!("user-{entity}"), "event_timestamp": iso(BASE + at)
        })).collect::<Vec<_>>(),
    });
    let result = historical_features(project.path(), "pit-spec.json", &spec);
    let got: Vec<Value> = result["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["purchases_30d"].clone())
        .collect();
    assert_eq!(got, expected, "{event_time_type}: {result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn historical_features_are_point_in_time_correct_for_a_long_millis_event_time() {
    point_in_time(r#""long""#, "pit_long").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn historical_features_are_point_in_time_correct_for_a_timestamp_millis_event_time() {
    point_in_time(
        r#"{"type": "long", "logicalType": "timestamp-millis"}"#,
        "pit_ts",
    )
    .await;
}
