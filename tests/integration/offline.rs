//! The offline store across crashes: every event exactly once in Parquet, whatever the
//! broker redelivers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::TimestampMillisecondType;
use object_store::local::LocalFileSystem;

use crate::common::*;

/// 50 s before an hour ends: the 100 s of events span two `hr=` partitions, so rollover
/// batches that straddle it are written as two files.
const BASE: i64 = 1_790_503_150_000;

fn event_indices(batches: &[(String, arrow::array::RecordBatch)]) -> (usize, BTreeSet<i64>) {
    let mut rows = 0;
    let mut seen = BTreeSet::new();
    for (_, batch) in batches {
        let times = batch.column(1).as_primitive::<TimestampMillisecondType>();
        for row in 0..batch.num_rows() {
            rows += 1;
            seen.insert(times.value(row) - BASE);
        }
    }
    (rows, seen)
}

async fn reset_cursor_to_start(topic: &str, subscription: &str) {
    let path = topic
        .strip_prefix("persistent://")
        .expect("persistent topic");
    let url = format!(
        "{}/admin/v2/persistent/{path}/subscription/{subscription}/resetcursor/0",
        pulsar_admin()
    );
    let response = reqwest::Client::new()
        .post(&url)
        .send()
        .await
        .expect("reset cursor");
    assert!(
        response.status().is_success(),
        "reset cursor: {}",
        response.status()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_five_times_and_a_full_redelivery_leave_every_event_once() {
    const EVENTS: u64 = 100_000;
    let project = Project::new(&redis_url());
    project.pipeline(
        "eo",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline\n  rollover_rows: 7000\n  rollover_interval: 1s",
    );
    project.produce("eo", EVENTS, 5_000, BASE, 100);
    let topic = project.topic.clone();

    // Five SIGKILLs at spread-out moments while the subscription is being consumed.
    for (round, after_ms) in [700u64, 1900, 1100, 2600, 1500].into_iter().enumerate() {
        let connector = project.start_with_env(&format!("run{round}.log"), &[]);
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        connector.kill_hard();
    }
    let connector = project.start_with_env("final.log", &[]);
    wait_drained(&topic, &["eo-offline"], Duration::from_secs(120)).await;
    assert_eq!(connector.stop(), 0);

    let store: Arc<dyn object_store::ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(project.path().join("offline")).expect("store"));
    let (rows, seen) = event_indices(&read_parquet(store.clone(), "eo").await);
    assert_eq!(seen.len() as u64, EVENTS, "every event is there");
    assert_eq!(rows as u64, EVENTS, "and only once");

    // The broker redelivers everything: nothing new may be written.
    reset_cursor_to_start(&topic, "eo-offline").await;
    let connector = project.start_with_env("redelivery.log", &[]);
    wait_drained(&topic, &["eo-offline"], Duration::from_secs(120)).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0);
    assert!(log.contains("skipping rows already committed"), "{log}");
    let files = read_parquet(store, "eo").await;
    let (rows, seen) = event_indices(&files);
    assert_eq!(
        (rows as u64, seen.len() as u64),
        (EVENTS, EVENTS),
        "still exactly once after a full redelivery"
    );
    let hours: BTreeSet<&str> = files
        .iter()
        .filter_map(|(f, _)| f.split('/').nth(2))
        .collect();
    assert_eq!(
        hours.len(),
        2,
        "events of two hours in two hr= partitions: {hours:?}"
    );

    // pyarrow (from the Feast venv) discovers the Hive partitions by itself.
    let python = crate::feast::feast_python();
    let script = "import json, sys, pyarrow.dataset as ds\n\
        t = ds.dataset(sys.argv[1], format='parquet', partitioning='hive').to_table()\n\
        print(json.dumps({'rows': t.num_rows, 'types': {f.name: str(f.type) for f in t.schema}}))";
    let output = std::process::Command::new(python)
        .args(["-c", script])
        .arg(project.path().join("offline/eo"))
        .output()
        .expect("python");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(read["rows"], serde_json::json!(EVENTS));
    let types = &read["types"];
    assert_eq!(types["user_id"], "string");
    assert_eq!(types["event_time"], "timestamp[ms, tz=+00:00]");
    assert_eq!(types["purchases_30d"], "int64");
    assert_eq!(types["sessions_7d"], "int32");
    assert_eq!(types["ctr_7d"], "float");
    assert_eq!(types["embedding_id"], "binary");
    assert!(
        types.get("dt").is_some() && types.get("hr").is_some(),
        "partition columns discovered: {types}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_into_an_empty_prefix_equals_the_live_pipeline_and_is_idempotent() {
    const EVENTS: u64 = 20_000;
    let project = Project::new(&redis_url());
    project.pipeline(
        "bf",
        "online:\n  enabled: false",
        "offline:\n  url: file://live\n  rollover_rows: 6000\n  rollover_interval: 1s",
    );
    project.produce("bf", EVENTS, 1_000, BASE, 100);
    let connector = project.start();
    wait_drained(&project.topic, &["bf-offline"], Duration::from_secs(60)).await;
    assert_eq!(connector.stop(), 0);

    let run_backfill = || {
        let output = project.run_command(&[
            "backfill",
            "--pipeline",
            "bf",
            "--from",
            "earliest",
            "--offline-url",
            "file://backfilled",
        ]);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let summary = run_backfill();
    assert!(
        summary.contains(&format!(
            "backfill bf: {EVENTS} messages, {EVENTS} rows, 0 undecodable"
        )),
        "{summary}"
    );

    let read = |dir: &str| {
        let store: Arc<dyn object_store::ObjectStore> =
            Arc::new(LocalFileSystem::new_with_prefix(project.path().join(dir)).expect("store"));
        async move { event_indices(&read_parquet(store, "bf").await) }
    };
    let (live_rows, live) = read("live").await;
    let (backfilled_rows, backfilled) = read("backfilled").await;
    assert_eq!(live_rows as u64, EVENTS);
    assert_eq!(
        (backfilled_rows, &backfilled),
        (live_rows, &live),
        "backfill equals the live pipeline"
    );

    // Again into the same prefix: nothing is written twice.
    let again = run_backfill();
    let (rows, seen) = read("backfilled").await;
    assert_eq!(
        (rows as u64, seen.len() as u64),
        (EVENTS, EVENTS),
        "idempotent: {again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollover_by_bytes_makes_files_near_the_target() {
    const EVENTS: u64 = 60_000;
    const TARGET: u64 = 100_000;
    let project = Project::new(&redis_url());
    std::fs::write(
        project.path().join("connectors/sz.yaml"),
        format!(
            "name: sz\nsource:\n  topic: {}\n  subscription: sz\n  max_batch_messages: 200\nschema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  event_time: event_time\noffline:\n  url: file://offline\n  rollover_bytes: {TARGET}\n  rollover_rows: 1000000\n  rollover_interval: 1h\n  partition_by: ingest_time\n  partition_granularity: day\n",
            project.topic
        ),
    )
    .expect("pipeline");
    project.produce("sz", EVENTS, 1_000, BASE, 100);
    let connector = project.start();
    // The last, partial file is written at shutdown; everything before by size.
    wait_until("files by size", Duration::from_secs(60), || {
        let dir = project.path().join("offline/sz");
        async move { parquet_sizes(&dir).len() >= 5 }
    })
    .await;
    wait_until("rows of all full files", Duration::from_secs(60), || {
        let dir = project.path().join("offline/sz");
        async move {
            let sizes = parquet_sizes(&dir);
            sizes.iter().sum::<u64>() as f64 >= 0.8 * (EVENTS as f64 * 20.0)
        }
    })
    .await;
    assert_eq!(connector.stop(), 0);
    let mut sizes = parquet_sizes(&project.path().join("offline/sz"));
    sizes.sort_unstable();
    let store: Arc<dyn object_store::ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(project.path().join("offline")).expect("store"));
    let (rows, seen) = event_indices(&read_parquet(store, "sz").await);
    assert_eq!((rows as u64, seen.len() as u64), (EVENTS, EVENTS));
    // The compression ratio is learned from each commit, so the first two files are a
    // warm-up and the last is the shutdown remainder: every other file is within ±10 %.
    let names = parquet_files(&project.path().join("offline/sz"));
    let middle: Vec<u64> = names[2..names.len() - 1]
        .iter()
        .map(|(_, size)| *size)
        .collect();
    assert!(middle.len() >= 3, "{names:?}");
    for size in &middle {
        let off = (*size as f64 - TARGET as f64).abs() / TARGET as f64;
        assert!(
            off <= 0.10,
            "file of {size} bytes is {:.0} % off the {TARGET} target: {names:?}",
            off * 100.0
        );
    }
}

/// Parquet files under `dir` (recursively), oldest first by name (first message id).
fn parquet_files(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "parquet") {
                let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                out.push((
                    p.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                    size,
                ));
            }
        }
    }
    // part-it-{ledger}_{entry}_{index}: numeric order of the first message.
    out.sort_by_key(|(name, _)| {
        name.trim_end_matches(".parquet")
            .rsplit('-')
            .next()
            .map(|id| {
                id.split('_')
                    .map(|n| n.parse::<i64>().unwrap_or(0))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    });
    out
}

fn parquet_sizes(dir: &std::path::Path) -> Vec<u64> {
    parquet_files(dir)
        .into_iter()
        .map(|(_, size)| size)
        .collect()
}
