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
    let (rows, seen) = event_indices(&read_parquet(store.clone(), "eo").await);
    assert_eq!(
        (rows as u64, seen.len() as u64),
        (EVENTS, EVENTS),
        "still exactly once after a full redelivery"
    );

    // Redelivered and new messages in the same buffers: the new rows are written once and
    // no committed file is overwritten by a buffer that starts with skipped messages.
    const MORE: u64 = 5_000;
    project.produce_with(
        "eo",
        &[
            "--count",
            &MORE.to_string(),
            "--start",
            &EVENTS.to_string(),
            "--entities",
            "5000",
            "--base-ms",
            &BASE.to_string(),
            "--batch",
            "100",
        ],
    );
    reset_cursor_to_start(&topic, "eo-offline").await;
    let connector = project.start_with_env("mixed.log", &[]);
    wait_drained(&topic, &["eo-offline"], Duration::from_secs(120)).await;
    assert_eq!(connector.stop(), 0);
    let files = read_parquet(store, "eo").await;
    let (rows, seen) = event_indices(&files);
    assert_eq!(
        (rows as u64, seen.len() as u64),
        (EVENTS + MORE, EVENTS + MORE),
        "exactly once with redelivered and new messages mixed"
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
    assert_eq!(read["rows"], serde_json::json!(EVENTS + MORE));
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
    // Every message taken by the offline lane; the last, partial file is written at shutdown.
    wait_until("all messages received", Duration::from_secs(60), || async {
        let received = format!(
            r#"feature_connector_messages_received_total{{pipeline="sz",sink="offline"}} {EVENTS}"#
        );
        project
            .http_get("/metrics")
            .await
            .is_some_and(|(_, body)| body.contains(&received))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_avro_type_round_trips_to_its_arrow_and_parquet_type() {
    use arrow::array::Array;
    use arrow::datatypes::{DataType, Field, Fields, TimeUnit};

    const EVENTS: u64 = 60;
    let project = Project::new(&redis_url());
    project.schema_file("all_types.avsc", include_str!("all_types.avsc"));
    let prefix = unique("types");
    // Only the age can roll this file over (the row limit is far away): a file appears while
    // the connector still runs.
    project.pipeline_with_schema(
        "types",
        "  file: schemas/all_types.avsc",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_rows: 1000000\n  rollover_interval: 1s",
    );
    project.produce("types", EVENTS, 10, BASE, 0);
    let connector = project.start();
    wait_drained(
        &project.topic,
        &["types-offline", "types-online"],
        Duration::from_secs(60),
    )
    .await;
    let store: Arc<dyn object_store::ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(project.path().join("offline")).expect("store"));
    let files = read_parquet(store, "types").await;
    assert!(
        !files.is_empty(),
        "the age rollover wrote a file before shutdown"
    );
    assert_eq!(connector.stop(), 0);

    let utc = Some("+00:00".into());
    let expected = vec![
        ("user_id", DataType::Utf8, false),
        (
            "event_time",
            DataType::Timestamp(TimeUnit::Millisecond, utc.clone()),
            false,
        ),
        ("f_int", DataType::Int32, false),
        ("f_long", DataType::Int64, false),
        ("f_float", DataType::Float32, false),
        ("f_double", DataType::Float64, false),
        ("f_bool", DataType::Boolean, false),
        ("f_bytes", DataType::Binary, false),
        ("f_string", DataType::Utf8, false),
        (
            "f_ts_micros",
            DataType::Timestamp(TimeUnit::Microsecond, utc),
            false,
        ),
        ("f_date", DataType::Date32, false),
        (
            "f_time_millis",
            DataType::Time32(TimeUnit::Millisecond),
            false,
        ),
        (
            "f_time_micros",
            DataType::Time64(TimeUnit::Microsecond),
            false,
        ),
        ("f_decimal", DataType::Decimal128(10, 2), false),
        ("f_uuid", DataType::FixedSizeBinary(16), false),
        ("f_nullable", DataType::Int64, true),
        (
            "f_record",
            DataType::Struct(Fields::from(vec![
                Field::new("a", DataType::Int32, false),
                Field::new("b", DataType::Utf8, false),
            ])),
            false,
        ),
        (
            "f_enum",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            false,
        ),
        ("f_fixed", DataType::FixedSizeBinary(4), false),
    ];
    let (_, batch) = &files[0];
    let schema = batch.schema();
    for (name, data_type, nullable) in &expected {
        let field = schema
            .field_with_name(name)
            .unwrap_or_else(|_| panic!("column {name}"));
        assert_eq!(field.data_type(), data_type, "type of {name}");
        assert_eq!(field.is_nullable(), *nullable, "nullability of {name}");
    }
    assert!(
        matches!(schema.field_with_name("f_array").expect("f_array").data_type(), DataType::List(item) if item.data_type() == &DataType::Int64)
    );
    assert!(matches!(
        schema.field_with_name("f_map").expect("f_map").data_type(),
        DataType::Map(_, _)
    ));

    // Values of one row come back as written.
    let rows: usize = files.iter().map(|(_, b)| b.num_rows()).sum();
    assert_eq!(rows as u64, EVENTS);
    let times = batch
        .column_by_name("event_time")
        .expect("event_time")
        .as_primitive::<TimestampMillisecondType>();
    let row = 0;
    let i = (times.value(row) - BASE) as u64;
    let decimal = batch
        .column_by_name("f_decimal")
        .expect("decimal")
        .as_primitive::<arrow::datatypes::Decimal128Type>();
    assert_eq!(decimal.value(row), i128::from(i) * 123);
    let uuid = batch
        .column_by_name("f_uuid")
        .expect("uuid")
        .as_fixed_size_binary();
    assert_eq!(
        uuid.value(row),
        uuid::Uuid::from_u128(u128::from(i)).as_bytes()
    );
    let colours = batch.column_by_name("f_enum").expect("enum");
    let colour = arrow::compute::cast(colours, &DataType::Utf8).expect("cast");
    assert_eq!(
        colour.as_string::<i32>().value(row),
        ["RED", "GREEN", "BLUE"][(i % 3) as usize]
    );
    let nullable = batch.column_by_name("f_nullable").expect("nullable");
    assert_eq!(nullable.is_null(row), i % 10 == 9);

    // Every file names its pipeline, schema and message range.
    let path = project.path().join("offline").join(&files[0].0);
    let reader =
        parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&path).expect("open"))
            .expect("parquet file");
    let kv: std::collections::HashMap<String, String> =
        parquet::file::reader::FileReader::metadata(&reader)
            .file_metadata()
            .key_value_metadata()
            .expect("key-value metadata")
            .iter()
            .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
            .collect();
    assert_eq!(
        kv.get("feature_connector.pipeline").map(String::as_str),
        Some("types")
    );
    let fingerprint = kv
        .get("feature_connector.schema_fingerprint")
        .cloned()
        .unwrap_or_default();
    assert!(
        fingerprint.len() == 16 && fingerprint.chars().all(|c| c.is_ascii_hexdigit()),
        "{fingerprint}"
    );
    let ranges: serde_json::Value =
        serde_json::from_str(kv.get("feature_connector.message_ranges").expect("ranges"))
            .expect("json");
    assert!(ranges[&project.topic].is_array(), "{ranges}");

    // The online store took every type too (native layout renders them as text).
    let mut redis = redis(&redis_url()).await;
    let stored: std::collections::HashMap<String, String> =
        redis::AsyncCommands::hgetall(&mut redis, format!("{prefix}:types:user-3"))
            .await
            .expect("hgetall");
    assert_eq!(
        stored.get("f_enum").map(String::as_str),
        Some(["RED", "GREEN", "BLUE"][(53 % 3) as usize])
    );
    assert_eq!(
        stored.get("f_decimal").map(String::as_str),
        Some(format!("{:.2}", 53.0 * 1.23).as_str())
    );
}
