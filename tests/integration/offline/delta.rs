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
/// `{"rows", "distinct_keys", "types", …}` as tests/delta/read_table.py prints it, the keys
/// being (user, event time).
pub fn read_with(reader: &str, table_uri: &str) -> Value {
    read_with_keys(reader, table_uri, "user_id,event_time")
}

/// [`read_with`] counting distinct values of `key_columns` (comma-separated).
pub fn read_with_keys(reader: &str, table_uri: &str, key_columns: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(delta_python())
        .arg(root.join("tests/delta/read_table.py"))
        .arg(table_uri)
        .args(["--reader", reader, "--key-columns", key_columns])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_handing_partitions_over_and_a_backfill_write_every_event_once() {
    const EVENTS: u64 = 40_000;
    let namespace = unique("rep");
    create_namespace(&namespace, "BACKWARD").await;
    retain_acknowledged(&namespace).await;
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
                ("RUST_LOG", "info,pulsar=warn,feature_connector::delta=debug,feature_connector::pipeline::lane=trace,feature_connector::source=debug"),
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
        wait_drained(partition, &["rep"], Duration::from_secs(120)).await;
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
        for (user, time) in event_ids(&batch) {
            *seen.entry((user.unwrap_or_default(), time)).or_insert(0) += 1;
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
    let v1 = include_str!("../../../schemas/user_profile.avsc");
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
    wait_drained(&project.topic, &["ev"], Duration::from_secs(60)).await;
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
    wait_drained(&project.topic, &["ev"], Duration::from_secs(60)).await;
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
