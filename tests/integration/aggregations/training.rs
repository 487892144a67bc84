//! Training sets from the table: events published in four waves a few seconds apart, then
//! 1,000 rows of (user, timestamp) before, between and up to a day after the waves; the
//! command's values and DuckDB's, running the SQL the command prints over the same table,
//! both equal the values worked out here from the events published by each timestamp.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

use super::{expected, payload, same, write_orders_pipeline, Order, Random, HOUR};
use crate::common::*;

/// The training set's rows as JSON objects (lists as arrays, nulls as null).
fn rows_of(batch: &RecordBatch) -> Vec<serde_json::Map<String, Value>> {
    let mut buffer = Vec::new();
    let mut writer = arrow_json::ArrayWriter::new(&mut buffer);
    writer.write(batch).expect("rows as JSON");
    writer.finish().expect("JSON written");
    serde_json::from_slice(&buffer).expect("JSON rows")
}

/// The rows of the training set at `path`.
pub fn read_training_set(path: &Path) -> Vec<serde_json::Map<String, Value>> {
    ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).expect("training set"))
        .expect("parquet")
        .build()
        .expect("reader")
        .flat_map(|b| rows_of(&b.expect("batch")))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn training_rows_equal_the_events_point_in_time_and_duckdb_agrees() {
    let project = Project::new(&redis_url());
    let offline = local_offline_url(&project);
    write_orders_pipeline(
        &project,
        &format!("offline:\n  url: {offline}\n  rollover_interval: 1s"),
    );
    let connector = project.start();

    // Four waves of 150 events over the last 30 hours, each published between its
    // `published` bounds; 5 users, one of whom (user-5) never has an event.
    let mut random = Random(11);
    let users: Vec<String> = (0..6).map(|u| format!("user-{u}")).collect();
    let mut waves: Vec<(i64, i64, Vec<Order>)> = Vec::new();
    for _ in 0..4 {
        let now = chrono::Utc::now().timestamp_millis();
        let orders: Vec<Order> = (0..150)
            .map(|_| Order {
                user: users[random.below(5) as usize].clone(),
                at: now - random.below(30 * HOUR),
                amount: (random.below(10) != 0).then(|| random.below(100_000) as f64 / 100.0),
                qty: random.below(20) - 5,
                item: format!("item-{}", random.below(1_000)),
            })
            .collect();
        let start = chrono::Utc::now().timestamp_millis();
        publish_raw(&project.topic, orders.iter().map(payload).collect()).await;
        let end = chrono::Utc::now().timestamp_millis();
        waves.push((start, end, orders));
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    wait_drained(&project.topic, &["orders"], Duration::from_secs(90)).await;
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");

    // 1,000 timestamps from 2 hours before the first wave to a day after the last, none
    // inside a wave (where publish times are not known here).
    let (first, last) = (waves[0].0, waves[3].1);
    let mut times = Vec::new();
    while times.len() < 1_000 {
        let t = first - 2 * HOUR + random.below(last - first + 26 * HOUR);
        let near_wave = t > first - 20_000 && t < last + 20_000;
        let inside = waves.iter().any(|(s, e, _)| t >= s - 50 && t <= e + 50);
        // Half the rows between the waves, where they differ.
        if !inside && (near_wave || times.len() % 2 == 0) {
            times.push(t);
        }
    }
    let spine: Vec<(String, i64)> = times
        .iter()
        .map(|&t| (users[random.below(6) as usize].clone(), t))
        .collect();
    let csv: String = std::iter::once("user_id,event_timestamp".to_string())
        .chain(spine.iter().map(|(u, t)| format!("{u},{t}")))
        .collect::<Vec<_>>()
        .join("\n");
    let spine_file = project.path().join("spine.csv");
    std::fs::write(&spine_file, csv + "\n").expect("spine");
    let truth = |user: &str, t: i64| {
        let published: Vec<Order> = waves
            .iter()
            .filter(|(_, end, _)| *end < t)
            .flat_map(|(_, _, orders)| orders.iter().cloned())
            .collect();
        expected(&published, user, t)
    };

    let output_file = project.path().join("training.parquet");
    let output = project.run_command(&[
        "offline",
        "training-set",
        "--pipeline",
        "orders",
        "--entities",
        spine_file.to_str().expect("path"),
        "--output",
        output_file.to_str().expect("path"),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reader = ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&output_file).expect("training set"),
    )
    .expect("parquet")
    .build()
    .expect("reader");
    let ours: Vec<_> = reader.flat_map(|b| rows_of(&b.expect("batch"))).collect();
    assert_eq!(ours.len(), spine.len());
    let mut nonzero = 0;
    for ((user, t), row) in spine.iter().zip(&ours) {
        assert_eq!(row["user_id"], Value::from(user.as_str()));
        for (feature, want) in truth(user, *t) {
            let got = row.get(&feature).unwrap_or(&Value::Null);
            assert!(
                same(&feature, got, &want),
                "{user} at {t}: {feature} = {got}, the events give {want}"
            );
        }
        nonzero += usize::from(row["orders_1d"].as_i64().unwrap_or(0) > 0);
    }
    assert!(nonzero > 300, "rows with events: {nonzero}");

    // The same through DuckDB, from the SQL the command prints.
    let sql = project.run_command(&[
        "offline",
        "training-set",
        "--pipeline",
        "orders",
        "--entities",
        spine_file.to_str().expect("path"),
        "--sql",
        "duckdb",
    ]);
    assert!(
        sql.status.success(),
        "{}",
        String::from_utf8_lossy(&sql.stderr)
    );
    let sql_file = project.path().join("training.sql");
    std::fs::write(&sql_file, &sql.stdout).expect("sql");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let duck = Command::new(crate::offline::delta_python())
        .arg(root.join("tests/training/duckdb_sql.py"))
        .arg(&sql_file)
        .output()
        .expect("run duckdb_sql.py");
    assert!(
        duck.status.success(),
        "duckdb: {}\n{}",
        String::from_utf8_lossy(&duck.stderr),
        String::from_utf8_lossy(&sql.stdout)
    );
    let duck_rows: Vec<serde_json::Map<String, Value>> =
        serde_json::from_slice(&duck.stdout).expect("duckdb JSON");
    assert_eq!(duck_rows.len(), spine.len());
    for ((user, t), row) in spine.iter().zip(&duck_rows) {
        for (feature, want) in truth(user, *t) {
            let got = row.get(&feature).unwrap_or(&Value::Null);
            assert!(
                same(&feature, got, &want),
                "DuckDB: {user} at {t}: {feature} = {got}, the events give {want}"
            );
        }
    }
}
