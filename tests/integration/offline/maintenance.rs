//! Maintenance of the offline Delta table: compaction while the connector writes, vacuum,
//! and the upgrade of a folder of the earlier format.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use crate::offline::delta::read_with;

const BASE: i64 = 1_790_600_000_000;

pub fn stdout_of(output: &std::process::Output) -> String {
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
    // A rollover overshoots `rollover_rows` by up to one batch: batches of 500 keep the
    // files at 500 rows, so that compaction has many to merge.
    project.pipeline_with_source(
        "cmp",
        "  max_batch_messages: 500\n",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline\n  rollover_rows: 500\n  rollover_interval: 1s",
    );
    project.produce("cmp", EVENTS, 500, BASE, 100);
    let connector = project.start();
    wait_drained(&project.topic, &["cmp"], Duration::from_secs(60)).await;
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
        "--target-mib",
        "128",
    ]);
    let report = stdout_of(&compacted);
    assert!(compacted.status.success(), "{report}");
    assert!(report.contains("compacted into version"), "{report}");
    let produced = producer.wait_with_output().expect("producer");
    assert!(produced.status.success());
    wait_drained(&project.topic, &["cmp"], Duration::from_secs(60)).await;
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
    let vacuum = |flags: &[&str]| {
        let mut args = vec!["offline", "vacuum", "--pipeline", "cmp", "--retain", "0s"];
        args.extend_from_slice(flags);
        project.run_command(&args)
    };
    let refused = vacuum(&[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stdout_of(&refused));
    // A dry run names what a vacuum would delete (the files compaction replaced) and deletes
    // nothing.
    let stored = walk_parquet(&project.path().join("offline/cmp"));
    let dry = vacuum(&["--allow-short-retention", "--dry-run"]);
    let report = stdout_of(&dry);
    assert!(dry.status.success(), "{report}");
    let would = report
        .lines()
        .filter(|l| l.starts_with("would delete "))
        .count();
    assert_eq!(would, stored - files.len(), "{report}");
    assert!(would > 0, "compaction left replaced files: {report}");
    assert_eq!(walk_parquet(&project.path().join("offline/cmp")), stored);
    let vacuumed = vacuum(&["--allow-short-retention"]);
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
