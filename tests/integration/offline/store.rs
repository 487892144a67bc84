//! The offline store across crashes: every event exactly once in the Delta table, whatever the
//! broker redelivers.

use std::collections::BTreeSet;
use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::TimestampMicrosecondType;

use crate::common::*;

/// 50 s before an hour ends: the 100 s of events span two `hr=` partitions, so rollover
/// batches that straddle it are written as two files.
const BASE: i64 = 1_790_503_150_000;

fn event_indices(batches: &[(String, arrow::array::RecordBatch)]) -> (usize, BTreeSet<i64>) {
    let mut rows = 0;
    let mut seen = BTreeSet::new();
    for (_, batch) in batches {
        let times = batch
            .column_by_name("event_time")
            .expect("event_time")
            .as_primitive::<TimestampMicrosecondType>();
        for row in 0..batch.num_rows() {
            rows += 1;
            seen.insert(times.value(row) / 1000 - BASE);
        }
    }
    (rows, seen)
}

async fn reset_cursor_to_start(topic: &str, subscription: &str) {
    let url = topic_admin_url(topic, &format!("subscription/{subscription}/resetcursor/0"));
    admin_ok(
        feature_connector::tls::http_client().post(&url),
        "reset cursor",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_five_times_and_a_full_redelivery_leave_every_event_once() {
    let project = Project::new(&redis_url());
    let store = local_offline_url(&project);
    kill_nine_and_redeliver(&project, "file://offline", &store, 100_000).await;
    let files = read_table(&store, "eo").await;
    let hours: BTreeSet<&str> = files
        .iter()
        .filter_map(|(f, _)| f.split('/').nth(1))
        .collect();
    assert_eq!(
        hours.len(),
        2,
        "events of two hours in two hr= partitions: {hours:?}"
    );
    // The Python deltalake package, Polars and DuckDB read the same rows and types.
    for reader in ["deltalake", "polars", "duckdb"] {
        let read = crate::offline::delta::read_with(reader, &format!("{store}/eo"));
        assert_eq!(read["rows"], serde_json::json!(105_000), "{reader}: {read}");
        assert_eq!(
            read["distinct_keys"],
            serde_json::json!(105_000),
            "{reader}: {read}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_on_s3_leaves_every_event_once() {
    let project = Project::new(&redis_url());
    let store = s3_url(&unique("eo-s3"));
    kill_nine_and_redeliver(&project, &store, &store, 30_000).await;
    let read = crate::offline::delta::read_with("deltalake", &format!("{store}/eo"));
    assert_eq!(read["rows"], serde_json::json!(31_500), "{read}");
    assert_eq!(read["distinct_keys"], serde_json::json!(31_500), "{read}");
}

/// SIGKILLs at spread-out moments while `events` are consumed, then a full redelivery, then
/// redelivered and new messages mixed (`events / 20` more): every event once, read back from
/// the table's log (`store` is the URL as the test reads it).
async fn kill_nine_and_redeliver(project: &Project, offline_url: &str, store: &str, events: u64) {
    project.pipeline(
        "eo",
        "online:\n  enabled: false",
        &format!("offline:\n  url: {offline_url}\n  rollover_rows: 7000\n  rollover_interval: 1s"),
    );
    project.produce("eo", events, 5_000, BASE, 100);
    let topic = project.topic.clone();

    for (round, after_ms) in [700u64, 1900, 1100, 2600, 1500].into_iter().enumerate() {
        let connector = project.start_with_env(&format!("run{round}.log"), &[]);
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        connector.kill_hard();
    }
    let connector = project.start_with_env("final.log", &[]);
    wait_drained(&topic, &["eo"], Duration::from_secs(120)).await;
    assert_eq!(connector.stop(), 0);

    let (rows, seen) = event_indices(&read_table(store, "eo").await);
    assert_eq!(seen.len() as u64, events, "every event is there");
    assert_eq!(rows as u64, events, "and only once");

    // The broker redelivers everything: nothing new may be written.
    reset_cursor_to_start(&topic, "eo").await;
    let connector = project.start_with_env("redelivery.log", &[]);
    wait_drained(&topic, &["eo"], Duration::from_secs(120)).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0);
    assert!(log.contains("skipping rows already committed"), "{log}");
    let (rows, seen) = event_indices(&read_table(store, "eo").await);
    assert_eq!(
        (rows as u64, seen.len() as u64),
        (events, events),
        "still exactly once after a full redelivery"
    );

    // Redelivered and new messages in the same buffers: the new rows are written once.
    let more = events / 20;
    project.produce_with(
        "eo",
        &[
            "--count",
            &more.to_string(),
            "--start",
            &events.to_string(),
            "--entities",
            "5000",
            "--base-ms",
            &BASE.to_string(),
            "--batch",
            "100",
        ],
    );
    reset_cursor_to_start(&topic, "eo").await;
    let connector = project.start_with_env("mixed.log", &[]);
    wait_drained(&topic, &["eo"], Duration::from_secs(120)).await;
    assert_eq!(connector.stop(), 0);
    let (rows, seen) = event_indices(&read_table(store, "eo").await);
    assert_eq!(
        (rows as u64, seen.len() as u64),
        (events + more, events + more),
        "exactly once with redelivered and new messages mixed"
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
    wait_drained(&project.topic, &["bf"], Duration::from_secs(60)).await;
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
        let store = format!("file://{}", project.path().join(dir).display());
        async move { event_indices(&read_table(&store, "bf").await) }
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
    let store = local_offline_url(&project);
    wait_until("files by size", Duration::from_secs(60), || {
        let dir = project.path().join("offline/sz/_delta_log");
        async move { std::fs::read_dir(dir).map_or(0, |d| d.count()) >= 6 }
    })
    .await;
    // Every row handed to the offline sink, whose last, partial file is written at shutdown.
    // (Received is not enough: a batch received but not yet handed over when the stop comes
    // is left unacknowledged for redelivery, and this run would miss it.)
    wait_until("every row handed over", Duration::from_secs(60), || async {
        let received = format!(
            r#"feature_connector_rows_written_total{{pipeline="sz",sink="offline"}} {EVENTS}"#
        );
        project
            .http_get("/metrics")
            .await
            .is_some_and(|(_, body)| body.contains(&received))
    })
    .await;
    assert_eq!(connector.stop(), 0);
    let (rows, seen) = event_indices(&read_table(&store, "sz").await);
    assert_eq!((rows as u64, seen.len() as u64), (EVENTS, EVENTS));
    // The compression ratio is learned from each commit, so the first two files are a
    // warm-up and the last is the shutdown remainder: every other file is within ±10 %.
    let sizes: Vec<u64> = commit_file_sizes(&store, "sz")
        .await
        .into_iter()
        .flatten()
        .collect();
    let middle = &sizes[2..sizes.len() - 1];
    assert!(middle.len() >= 3, "{sizes:?}");
    for size in middle {
        let off = (*size as f64 - TARGET as f64).abs() / TARGET as f64;
        assert!(
            off <= 0.10,
            "file of {size} bytes is {:.0} % off the {TARGET} target: {sizes:?}",
            off * 100.0
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_avro_type_round_trips_to_its_delta_type() {
    use arrow::array::Array;
    use arrow::datatypes::{DataType, TimeUnit};

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
    wait_drained(&project.topic, &["types"], Duration::from_secs(60)).await;
    let store = local_offline_url(&project);
    let files = read_table(&store, "types").await;
    assert!(
        !files.is_empty(),
        "the age rollover committed before shutdown"
    );
    assert_eq!(connector.stop(), 0);

    // Delta's types, as the table's files carry them (every column nullable).
    let utc = Some("UTC".into());
    let micros = DataType::Timestamp(TimeUnit::Microsecond, utc);
    let expected = vec![
        ("user_id", DataType::Utf8),
        ("event_time", micros.clone()),
        ("f_int", DataType::Int32),
        ("f_long", DataType::Int64),
        ("f_float", DataType::Float32),
        ("f_double", DataType::Float64),
        ("f_bool", DataType::Boolean),
        ("f_bytes", DataType::Binary),
        ("f_string", DataType::Utf8),
        ("f_ts_micros", micros.clone()),
        ("f_date", DataType::Date32),
        ("f_time_millis", DataType::Int32),
        ("f_time_micros", DataType::Int64),
        ("f_decimal", DataType::Decimal128(10, 2)),
        ("f_uuid", DataType::Binary),
        ("f_nullable", DataType::Int64),
        ("f_enum", DataType::Utf8),
        ("f_fixed", DataType::Binary),
        ("pulsar_publish_time", micros),
    ];
    let (_, batch) = &files[0];
    let schema = batch.schema();
    for (name, data_type) in &expected {
        let field = schema
            .field_with_name(name)
            .unwrap_or_else(|_| panic!("column {name}"));
        assert_eq!(field.data_type(), data_type, "type of {name}");
        assert!(field.is_nullable(), "{name} is nullable in the table");
    }
    assert!(
        matches!(schema.field_with_name("f_record").expect("f_record").data_type(), DataType::Struct(fields) if fields.len() == 2)
    );
    assert!(
        matches!(schema.field_with_name("f_array").expect("f_array").data_type(), DataType::List(item) if item.data_type() == &DataType::Int64)
    );
    assert!(matches!(
        schema.field_with_name("f_map").expect("f_map").data_type(),
        DataType::Map(_, _)
    ));
    assert!(
        schema.field_with_name("dt").is_err(),
        "partition values live in the log, not in the files"
    );

    // Values of one row come back as written.
    let rows: usize = files.iter().map(|(_, b)| b.num_rows()).sum();
    assert_eq!(rows as u64, EVENTS);
    let times = batch
        .column_by_name("event_time")
        .expect("event_time")
        .as_primitive::<TimestampMicrosecondType>();
    let row = 0;
    let i = (times.value(row) / 1000 - BASE) as u64;
    let decimal = batch
        .column_by_name("f_decimal")
        .expect("decimal")
        .as_primitive::<arrow::datatypes::Decimal128Type>();
    assert_eq!(decimal.value(row), i128::from(i) * 123);
    let uuid = batch
        .column_by_name("f_uuid")
        .expect("uuid")
        .as_binary::<i32>();
    assert_eq!(
        uuid.value(row),
        uuid::Uuid::from_u128(u128::from(i)).as_bytes()
    );
    let colour = batch.column_by_name("f_enum").expect("enum");
    assert_eq!(
        colour.as_string::<i32>().value(row),
        ["RED", "GREEN", "BLUE"][(i % 3) as usize]
    );
    let nullable = batch.column_by_name("f_nullable").expect("nullable");
    assert_eq!(nullable.is_null(row), i % 10 == 9);

    // Every file names its pipeline, schema and message range.
    let path = project.path().join("offline/types").join(&files[0].0);
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

    // DuckDB's delta extension and Polars read every row and type of this table too.
    for reader in ["duckdb", "polars"] {
        let read = crate::offline::delta::read_with(reader, &format!("{store}/types"));
        assert_eq!(read["rows"], serde_json::json!(EVENTS), "{reader}: {read}");
        let types = read["types"].as_object().expect("types");
        assert_eq!(types.len(), expected.len() + 5, "{reader}: {read}");
    }

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
