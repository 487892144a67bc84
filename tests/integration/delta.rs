//! The offline Delta table under concurrency and change: replicas handing partitions over
//! while a producer runs, a backfill next to them, schema evolution, a legacy folder, and the
//! outside readers (Python `deltalake`, Polars, DuckDB) that prove the table is standard.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

const BASE: i64 = 1_790_600_000_000;

/// The python of the venv scripts/delta_env.sh makes (Feast, deltalake, Polars, DuckDB).
pub fn delta_python() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("bash")
        .arg(root.join("scripts/delta_env.sh"))
        .output()
        .expect("run scripts/delta_env.sh");
    assert!(
        output.status.success(),
        "delta_env.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .expect("python path")
        .trim()
        .to_string()
}

/// Reads the table at `table_uri` with `reader` (`deltalake`, `polars`, `duckdb`):
/// `{"rows", "distinct_keys", "types", …}` as tests/delta/read_table.py prints it.
pub fn read_with(reader: &str, table_uri: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(delta_python())
        .arg(root.join("tests/delta/read_table.py"))
        .arg(table_uri)
        .args(["--reader", reader, "--key-columns", "user_id,event_time"])
        .env("AWS_ENDPOINT_URL", s3_endpoint())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("run read_table.py");
    assert!(
        output.status.success(),
        "read_table.py --reader {reader} {table_uri}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("read_table.py prints JSON")
}

/// Sets the namespace's retention so that acknowledged messages stay readable (backfill).
async fn retain(namespace: &str) {
    let response = reqwest::Client::new()
        .post(format!(
            "{}/admin/v2/namespaces/public/{namespace}/retention",
            pulsar_admin()
        ))
        .header("content-type", "application/json")
        .body(r#"{"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}"#)
        .send()
        .await
        .expect("set retention");
    assert!(
        response.status().is_success(),
        "set retention: {}",
        response.status()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_handing_partitions_over_and_a_backfill_write_every_event_once() {
    const EVENTS: u64 = 40_000;
    let namespace = unique("rep");
    create_namespace(&namespace, "BACKWARD").await;
    retain(&namespace).await;
    let mut project = Project::new(&redis_url());
    project.topic = format!("persistent://public/{namespace}/features");
    create_partitioned_topic(&project.topic, 4).await;
    project.pipeline(
        "rep",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline\n  rollover_rows: 2000\n  rollover_interval: 1s",
    );
    let ports = [free_port(), free_port()];
    let start = |replica: usize, round: usize| {
        project.start_with_env(
            &format!("r{replica}-{round}.log"),
            &[
                ("FC_INSTANCE_ID", &format!("r{replica}")),
                ("FC_HTTP_BIND", &format!("127.0.0.1:{}", ports[replica])),
                ("RUST_LOG", "info,pulsar=warn,feature_connector::sink::delta=debug,feature_connector::pipeline::lane=trace,feature_connector::source=debug"),
            ],
        )
    };
    let mut replicas = [Some(start(0, 0)), Some(start(1, 0))];
    let producer = project
        .command_with_env(
            &[
                "produce",
                "--pipeline",
                "rep",
                "--count",
                &EVENTS.to_string(),
                "--entities",
                "2000",
                "--base-ms",
                &BASE.to_string(),
                "--batch",
                "50",
                "--rate",
                "4000",
            ],
            &[],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the producer");

    // Rolling restarts and crashes while the producer runs: a partition moves to the other
    // replica while the first may still hold an uncommitted rollover of it.
    let started = Instant::now();
    let mut round = 1;
    while started.elapsed() < Duration::from_secs(9) {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let which = round % 2;
        if let Some(replica) = replicas[which].take() {
            if round % 3 == 0 {
                replica.kill_hard();
            } else {
                let (code, log) = replica.stop_with_log();
                assert_eq!(code, 0, "graceful stop of r{which}: {log}");
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        replicas[which] = Some(start(which, round));
        round += 1;
    }
    let produced = producer.wait_with_output().expect("producer");
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );

    // A backfill of the whole topic commits into the same table while both replicas drain.
    let backfill = project.run_command(&["backfill", "--pipeline", "rep", "--from", "earliest"]);
    assert!(
        backfill.status.success(),
        "{}{}",
        String::from_utf8_lossy(&backfill.stdout),
        String::from_utf8_lossy(&backfill.stderr)
    );
    let partitions: Vec<String> = (0..4)
        .map(|p| format!("{}-partition-{p}", project.topic))
        .collect();
    for partition in &partitions {
        wait_drained(partition, &["rep-offline"], Duration::from_secs(120)).await;
    }
    for replica in replicas.into_iter().flatten() {
        assert_eq!(replica.stop(), 0);
    }
    // How often the hand-over mattered in this run (informative: timing decides).
    let logs: String = std::fs::read_dir(project.path())
        .expect("project dir")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    println!(
        "restarts: {round}, skipped-row batches: {}, commit conflicts: {}, rewinds: {}, waits on a gap: {}",
        logs.matches("skipping rows already committed").count(),
        logs.matches("another writer committed first").count(),
        logs.matches("delivers a partition again").count(),
        logs.matches("wait for it to fill").count()
    );
    let store = local_offline_url(&project);
    let mut seen = std::collections::HashMap::new();
    for (_, batch) in read_table(&store, "rep").await {
        let users = batch.column_by_name("user_id").expect("user_id");
        let users = arrow::compute::cast(users, &arrow::datatypes::DataType::Utf8).expect("cast");
        let users = users
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .expect("strings");
        let times = arrow::compute::cast(
            batch.column_by_name("event_time").expect("event_time"),
            &arrow::datatypes::DataType::Int64,
        )
        .expect("cast");
        let times = times
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .expect("int64");
        for row in 0..batch.num_rows() {
            *seen
                .entry((users.value(row).to_string(), times.value(row)))
                .or_insert(0) += 1;
        }
    }
    let found: usize = seen.values().sum();
    if found != EVENTS as usize || seen.len() != EVENTS as usize {
        // Keep the evidence: logs and the table.
        let keep = std::env::temp_dir().join(format!("rep-failed-{}", unique("x")));
        let _ = Command::new("cp")
            .arg("-r")
            .arg(project.path())
            .arg(&keep)
            .status();
        panic!(
            "{found} rows, {} distinct, of {EVENTS} events in the table; project kept in {}",
            seen.len(),
            keep.display()
        );
    }
    let read = read_with("deltalake", &format!("{store}/rep"));
    assert_eq!(read["rows"], serde_json::json!(EVENTS), "{read}");
    assert_eq!(read["distinct_keys"], serde_json::json!(EVENTS), "{read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gained_field_adds_a_column_and_a_type_change_is_refused() {
    let project = Project::new(&redis_url());
    let v1 = include_str!("../../schemas/user_profile.avsc");
    project.schema_file("evo.avsc", v1);
    let offline =
        "offline:\n  url: file://offline\n  rollover_rows: 100000\n  rollover_interval: 1s";
    project.pipeline_with_schema(
        "ev",
        "  file: schemas/evo.avsc",
        "online:\n  enabled: false",
        offline,
    );
    project.produce("ev", 100, 10, BASE, 0);
    let connector = project.start();
    wait_drained(&project.topic, &["ev-offline"], Duration::from_secs(60)).await;
    assert_eq!(connector.stop(), 0);

    // v2 gains a field with a default: the table gets a nullable column.
    let v2 = v1.replacen(
        r#"{"name": "last_review_score""#,
        r#"{"name": "loyalty_tier", "type": "string", "default": "none"},
    {"name": "last_review_score""#,
        1,
    );
    project.schema_file("evo.avsc", &v2);
    project.produce_with(
        "ev",
        &[
            "--count",
            "50",
            "--start",
            "100",
            "--entities",
            "10",
            "--base-ms",
            &BASE.to_string(),
        ],
    );
    let connector = project.start();
    wait_drained(&project.topic, &["ev-offline"], Duration::from_secs(60)).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
    assert!(
        log.contains("loyalty_tier"),
        "the log names the added column: {log}"
    );
    let store = local_offline_url(&project);
    let rows = read_table(&store, "ev").await;
    let (mut with, mut without) = (0, 0);
    for (_, batch) in &rows {
        match batch.column_by_name("loyalty_tier") {
            Some(column) => with += batch.num_rows() - arrow::array::Array::null_count(column),
            None => without += batch.num_rows(),
        }
    }
    assert_eq!(
        (without, with),
        (100, 50),
        "older files have no such column, new rows have it"
    );
    let read = read_with("deltalake", &format!("{store}/ev"));
    assert_eq!(read["rows"], serde_json::json!(150), "{read}");
    assert!(read["types"]["loyalty_tier"].is_string(), "{read}");

    // v3 turns an int into a long: Avro reads it, the Delta table cannot change the type.
    let (table, _) = open_table(&store, "ev").await;
    let version = table.version();
    let v3 = v2.replacen(
        r#"{"name": "sessions_7d", "type": "int"}"#,
        r#"{"name": "sessions_7d", "type": "long"}"#,
        1,
    );
    assert_ne!(v3, v2);
    project.schema_file("evo.avsc", &v3);
    let output = project.run_command(&["run"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("field `sessions_7d`"), "{stderr}");
    let (table, _) = open_table(&store, "ev").await;
    assert_eq!(table.version(), version, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_of_plain_parquet_files_is_refused_with_the_way_out() {
    let project = Project::new(&redis_url());
    project.pipeline(
        "old",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline",
    );
    let legacy = project.path().join("offline/old/dt=2026-01-01/hr=00");
    std::fs::create_dir_all(&legacy).expect("mkdir");
    std::fs::write(legacy.join("part-local-0-1_0_-1.parquet"), b"PAR1").expect("file");
    let output = project.run_command(&["run"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("1 Parquet file(s)"), "{stderr}");
    assert!(
        stderr.contains("feature-connector offline upgrade --pipeline old"),
        "{stderr}"
    );
    assert!(
        !project.path().join("offline/old/_delta_log").exists(),
        "no table was created over the old files"
    );
}

fn stdout_of(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_the_connector_writes_keeps_every_row_and_vacuum_deletes_the_rest() {
    const EVENTS: u64 = 10_000;
    let project = Project::new(&redis_url());
    project.pipeline(
        "cmp",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline\n  rollover_rows: 500\n  rollover_interval: 1s",
    );
    project.produce("cmp", EVENTS, 500, BASE, 100);
    let connector = project.start();
    wait_drained(&project.topic, &["cmp-offline"], Duration::from_secs(60)).await;
    let store = local_offline_url(&project);
    let before = read_table(&store, "cmp")
        .await
        .into_iter()
        .map(|(f, _)| f)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(before >= 10, "{before} files of 500 rows");

    // More events arrive while the table is compacted: both commits land, no row twice.
    let producer = project
        .command_with_env(
            &[
                "produce",
                "--pipeline",
                "cmp",
                "--count",
                &EVENTS.to_string(),
                "--start",
                &EVENTS.to_string(),
                "--entities",
                "500",
                "--base-ms",
                &BASE.to_string(),
                "--batch",
                "100",
                "--rate",
                "3000",
            ],
            &[],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("producer");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let compacted = project.run_command(&[
        "offline",
        "compact",
        "--pipeline",
        "cmp",
        "--older-than",
        "0s",
    ]);
    let report = stdout_of(&compacted);
    assert!(compacted.status.success(), "{report}");
    assert!(report.contains("compacted into version"), "{report}");
    let produced = producer.wait_with_output().expect("producer");
    assert!(produced.status.success());
    wait_drained(&project.topic, &["cmp-offline"], Duration::from_secs(60)).await;
    assert_eq!(connector.stop(), 0);
    assert_eq!(unique_events(&store, "cmp").await, 2 * EVENTS as usize);
    // "compacted into version V: before N files, B bytes, after M files, …"
    let counts: Vec<usize> = report
        .split("compacted into version")
        .nth(1)
        .expect("summary line")
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|word| word.parse().ok())
        .collect();
    assert!(
        counts.len() >= 5 && counts[3] < counts[1] && counts[1] >= before,
        "fewer files after compaction: {report}"
    );
    let files: std::collections::BTreeSet<String> = read_table(&store, "cmp")
        .await
        .into_iter()
        .map(|(f, _)| f)
        .collect();

    // Vacuum: a short retention needs the explicit flag; then only referenced files remain.
    let refused =
        project.run_command(&["offline", "vacuum", "--pipeline", "cmp", "--retain", "0s"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stdout_of(&refused));
    let vacuumed = project.run_command(&[
        "offline",
        "vacuum",
        "--pipeline",
        "cmp",
        "--retain",
        "0s",
        "--allow-short-retention",
    ]);
    let report = stdout_of(&vacuumed);
    assert!(vacuumed.status.success(), "{report}");
    let on_disk = walk_parquet(&project.path().join("offline/cmp"));
    assert_eq!(on_disk, files.len(), "{report}");
    assert_eq!(unique_events(&store, "cmp").await, 2 * EVENTS as usize);
    let read = read_with("deltalake", &format!("{store}/cmp"));
    assert_eq!(read["rows"], serde_json::json!(2 * EVENTS), "{read}");
}

fn walk_parquet(dir: &Path) -> usize {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() && !p.ends_with("_delta_log") {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "parquet") {
                count += 1;
            }
        }
    }
    count
}

/// One file of the earlier offline format: rows of events `range`, its batch's footer keys.
fn legacy_file(
    dir: &Path,
    name: &str,
    range: std::ops::Range<i64>,
    batch: &str,
    files: usize,
    topic: &str,
    last_entry: u64,
) {
    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
    use parquet::file::metadata::KeyValue;
    let rows = RecordBatch::try_from_iter(vec![
        (
            "user_id",
            std::sync::Arc::new(StringArray::from_iter_values(
                range.clone().map(|i| format!("user-{}", i % 10)),
            )) as ArrayRef,
        ),
        (
            "event_time",
            std::sync::Arc::new(
                TimestampMillisecondArray::from_iter_values(range.clone().map(|i| BASE + i))
                    .with_timezone("+00:00"),
            ),
        ),
        (
            "purchases_30d",
            std::sync::Arc::new(Int64Array::from_iter_values(range.map(|i| i * 3))),
        ),
    ])
    .expect("rows");
    let ranges = serde_json::json!({ topic: ["5:0:-1", format!("5:{last_entry}:-1")] }).to_string();
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(vec![
            KeyValue::new("feature_connector.batch_id".into(), batch.to_string()),
            KeyValue::new("feature_connector.batch_files".into(), files.to_string()),
            KeyValue::new("feature_connector.message_ranges".into(), ranges),
        ]))
        .build();
    std::fs::create_dir_all(dir).expect("mkdir");
    let file = std::fs::File::create(dir.join(name)).expect("file");
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, rows.schema(), Some(properties))
        .expect("writer");
    writer.write(&rows).expect("write");
    writer.close().expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_upgrade_turns_an_old_folder_into_the_table_once() {
    let project = Project::new(&redis_url());
    project.pipeline(
        "up",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline",
    );
    let topic = project.topic.clone();
    let hour = project.path().join("offline/up/dt=2026-09-25/hr=10");
    // Batch a: two files (complete); batch b: one file; batch c: one of its two files (a crash).
    legacy_file(
        &hour,
        "part-local-0-5_0_-1.parquet",
        0..100,
        "local-5:0:-1",
        2,
        &topic,
        199,
    );
    legacy_file(
        &hour,
        "part-local-0-5_100_-1.parquet",
        100..200,
        "local-5:0:-1",
        2,
        &topic,
        199,
    );
    legacy_file(
        &hour,
        "part-local-0-5_200_-1.parquet",
        200..300,
        "local-5:200:-1",
        1,
        &topic,
        299,
    );
    legacy_file(
        &hour,
        "part-local-0-5_300_-1.parquet",
        300..350,
        "local-5:300:-1",
        2,
        &topic,
        399,
    );

    let refused = project.run_command(&["run"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout_of(&refused));
    let upgraded = project.run_command(&["offline", "upgrade", "--pipeline", "up"]);
    let report = stdout_of(&upgraded);
    assert!(upgraded.status.success(), "{report}");
    assert!(report.contains("4 old-format files"), "{report}");
    assert!(report.contains("300 rows converted"), "{report}");
    assert!(
        report.contains("3 old files deleted, 1 files of incomplete batches"),
        "{report}"
    );
    let store = local_offline_url(&project);
    assert_eq!(unique_events(&store, "up").await, 300);
    let (table, location) = open_table(&store, "up").await;
    let entry = table
        .snapshot()
        .expect("state")
        .transaction_version(
            location.log_store.as_ref(),
            format!("feature-connector:{topic}#entry"),
        )
        .await
        .expect("txn");
    assert_eq!(
        entry,
        Some(299),
        "the last converted message is the table's position"
    );

    // Again: nothing new; then the connector starts on the table.
    let again = project.run_command(&["offline", "upgrade", "--pipeline", "up"]);
    assert!(again.status.success(), "{}", stdout_of(&again));
    assert!(
        stdout_of(&again).contains("0 rows converted"),
        "{}",
        stdout_of(&again)
    );
    assert_eq!(unique_events(&store, "up").await, 300);
    let read = read_with("deltalake", &format!("{store}/up"));
    assert_eq!(read["rows"], serde_json::json!(300), "{read}");
    let connector = project.start();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
}
