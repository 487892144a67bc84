//! Ties across regions: producers in both regions write the same entities at the same event
//! times with different values, at once. Each region sees its own events first, so "the later
//! write wins" would leave each region with its own values; the tie rule (publish time, then
//! origin cluster) makes both end with the same value per entity.

use std::collections::HashMap;
use std::time::Duration;

use arrow::datatypes::DataType;
use feature_connector::redis::feast::key_from_text;
use redis::AsyncCommands;

use super::*;

const BASE: i64 = 1_793_000_000_000;
const ENTITIES: u64 = 500;
/// Events per region: every entity gets `EVENTS / ENTITIES` event times, each in both.
const EVENTS: u64 = 5_000;
/// Region B's first event: its event `OFFSET + i` has the entity and event time of region
/// A's event `i` (`OFFSET % ENTITIES == 0`) and another value.
const OFFSET: u64 = 1_000_000;

/// Runs `produce` from `start` with `base_ms`, sending its first event at `at` (epoch ms) at
/// 2,000 events/s: the two regions' producers send each tie pair within a few milliseconds
/// of each other, less than replication takes, so each region receives its own event of a
/// pair first.
fn produce(project: &Project, start: u64, base_ms: i64, at: i64) -> std::thread::JoinHandle<()> {
    let args = [
        "--start-at".to_string(),
        at.to_string(),
        "--rate".into(),
        "2000".into(),
        "--start".into(),
        start.to_string(),
        "--count".into(),
        EVENTS.to_string(),
        "--entities".into(),
        ENTITIES.to_string(),
        "--base-ms".into(),
        base_ms.to_string(),
    ];
    produce_with(project, args.to_vec())
}

/// Per user of the table, its rows at its newest event time: `(purchases_30d, publish ms)`.
fn newest_rows_in_table(table_uri: &str) -> HashMap<String, Vec<(i64, u64)>> {
    let script = r#"
import json, sys
sys.path.insert(0, sys.argv[2])
import read_table
from deltalake import DeltaTable
uri = sys.argv[1]
t = DeltaTable(uri, storage_options=read_table.storage_options(uri)).to_pyarrow_table(
    columns=["user_id", "event_time", "purchases_30d", "pulsar_publish_time"])
newest = {}
for user, et, purchases, published in zip(
        t.column("user_id").to_pylist(), t.column("event_time").cast("int64").to_pylist(),
        t.column("purchases_30d").to_pylist(),
        t.column("pulsar_publish_time").cast("int64").to_pylist()):
    at, rows = newest.get(user, (None, []))
    if at is None or et > at:
        newest[user] = (et, [[purchases, published // 1000]])
    elif et == at:
        rows.append([purchases, published // 1000])
print(json.dumps({user: rows for user, (_, rows) in newest.items()}), flush=True)
# Skip the interpreter's teardown: native threads left by the readers can abort it
# ("terminate called without an active exception") after the answer is out.
import os
os._exit(0)
"#;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(crate::offline::delta_python())
        .args(["-c", script, table_uri])
        .arg(root.join("tests/delta"))
        .env("AWS_ENDPOINT_URL", s3_endpoint())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("read the table");
    assert!(
        output.status.success(),
        "reading {table_uri}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON from the table read")
}

/// `_tie:user_features` of every user in the Redis at `url`.
async fn stored_ties(url: &str, feast_project: &str) -> Vec<String> {
    let client = redis::Client::open(url).expect("redis url");
    let mut redis = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to Redis");
    let mut ties = Vec::new();
    for entity in 0..ENTITIES {
        let user = format!("user-{entity}");
        let key = key_from_text(feast_project, &[("user_id", &user, &DataType::Utf8)])
            .expect("Feast key");
        let tie: Option<String> = redis
            .hget(key, "_tie:user_features")
            .await
            .expect("HGET the tie field");
        ties.push(tie.unwrap_or_default());
    }
    ties
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_event_times_in_both_regions_end_with_the_same_value_everywhere() {
    const _: () = assert!(OFFSET.is_multiple_of(ENTITIES));
    let geo = TwoRegions::new(4, "    offline: own_region\n").await;
    let (regions, topic) = (&geo.regions, &geo.topic);
    let (project_a, project_b) = (&geo.a, &geo.b);

    let sidecar_a = project_a.start_with_env("run-a.log", &[]);
    let sidecar_b = project_b.start_with_env("run-b.log", &[]);
    // Both producers connect, then send their first event at the same moment.
    let at = chrono::Utc::now().timestamp_millis() + 3_000;
    let producers = [
        produce(project_a, 0, BASE, at),
        produce(project_b, OFFSET, BASE - OFFSET as i64, at),
    ];
    for producer in producers {
        producer.join().expect("producer thread");
    }
    wait_drained_everywhere(regions, topic, "user_features", Duration::from_secs(180)).await;
    let (code_b, log_b) = sidecar_b.stop_with_log();
    let (code_a, log_a) = sidecar_a.stop_with_log();
    assert_eq!((code_a, code_b), (0, 0), "clean shutdowns");
    assert_quiet("region A's sidecar", &log_a);
    assert_quiet_but_broker_retries("region B's sidecar", &log_b);

    // What the rule picks, from the table (each region committed its own events with their
    // publish times): per user, the greater `<publish ms>:<origin cluster>` of its two rows
    // at its newest event time.
    let table = newest_rows_in_table(&format!("{}/user_features", geo.table_url));
    let expected: Vec<(i64, String)> = (0..ENTITIES)
        .map(|entity| {
            let rows = &table[&format!("user-{entity}")];
            assert_eq!(rows.len(), 2, "user-{entity}: one row per region: {rows:?}");
            rows.iter()
                .map(|&(purchases, published)| {
                    let region = usize::from(purchases >= 3 * OFFSET as i64);
                    let tie = format!("{published:020}:{}", regions[region].cluster);
                    (tie, purchases)
                })
                .max()
                .map(|(tie, purchases)| (purchases, tie))
                .expect("two rows")
        })
        .collect();
    let newest_ms = |entity: u64| BASE + (EVENTS - ENTITIES + entity) as i64;

    let mut reads = Vec::new();
    let urls = [redis_url(), geo.redis_b_url.clone()];
    for ((name, host), url) in ["A", "B"].into_iter().zip(geo.redis_hosts()).zip(urls) {
        let read = feast_read(&host, &geo.feast_project, ENTITIES);
        let ties = stored_ties(&url, &geo.feast_project).await;
        for (entity, (purchases, event_ms)) in read.iter().enumerate() {
            let (want, tie) = &expected[entity];
            assert_eq!(
                (*purchases, *event_ms, &ties[entity]),
                (*want, newest_ms(entity as u64), tie),
                "region {name}, user-{entity}"
            );
        }
        reads.push(read);
    }
    assert_eq!(reads[0], reads[1], "both regions read the same");
    // Both regions' values occur among the winners (publish times decide, not the region).
    let from_b = expected
        .iter()
        .filter(|(purchases, _)| *purchases >= 3 * OFFSET as i64)
        .count();
    eprintln!("ties won by region B's events: {from_b} of {ENTITIES}");
}
