//! 10,000 Avro events for 1,000 entities through two pipelines (local disk and S3 offline
//! stores) on one topic: Redis holds each entity's latest values, Parquet every row once.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMicrosecondType};
use redis::AsyncCommands;

use crate::common::*;

const EVENTS: u64 = 10_000;
const ENTITIES: u64 = 1_000;
const BASE_MS: i64 = 1_780_000_000_000;

/// The values event `i` carries, per the sample generator (see `feature_connector::sample`).
fn expected_hash(i: u64) -> HashMap<String, Vec<u8>> {
    let mut fields = HashMap::new();
    let f = i as f64;
    fields.insert(
        "_ts".to_string(),
        (BASE_MS + i as i64).to_string().into_bytes(),
    );
    fields.insert("purchases_30d".into(), (i * 3).to_string().into_bytes());
    fields.insert(
        "sessions_7d".into(),
        (i % 1000 + 3).to_string().into_bytes(),
    );
    fields.insert("avg_basket_eur".into(), format_float(f / 4.0 + 4.0));
    fields.insert(
        "ctr_7d".into(),
        format_float(f64::from(i as f32 / 4.0 + 5.0)),
    );
    fields.insert(
        "is_premium".into(),
        i.is_multiple_of(2).to_string().into_bytes(),
    );
    fields.insert(
        "favourite_category".into(),
        format!("favourite_category-{i}").into_bytes(),
    );
    fields.insert("embedding_id".into(), i.to_le_bytes().to_vec());
    if i % 10 != 9 {
        fields.insert("last_review_score".into(), format_float(f / 4.0 + 9.0));
    }
    fields
}

/// Floats are compared as numbers: the text form is checked to parse back exactly.
fn format_float(value: f64) -> Vec<u8> {
    format!("float:{value}").into_bytes()
}

fn normalise(stored: HashMap<String, Vec<u8>>) -> HashMap<String, Vec<u8>> {
    stored
        .into_iter()
        .map(|(k, v)| {
            if matches!(
                k.as_str(),
                "avg_basket_eur" | "ctr_7d" | "last_review_score"
            ) {
                let text = String::from_utf8(v).expect("float as text");
                let parsed: f64 = text
                    .parse()
                    .unwrap_or_else(|_| panic!("{k}={text} is not a number"));
                (k, format_float(parsed))
            } else {
                (k, v)
            }
        })
        .collect()
}

fn check_rows(batches: &[(String, arrow::array::RecordBatch)], where_: &str) {
    let rows: usize = batches.iter().map(|(_, b)| b.num_rows()).sum();
    assert_eq!(rows as u64, EVENTS, "{where_}: rows in the table");
    let mut seen = BTreeSet::new();
    let mut purchases_sum: i64 = 0;
    for (file, batch) in batches {
        let schema = batch.schema();
        let types: Vec<(&str, DataType)> = schema
            .fields()
            .iter()
            .map(|f| (f.name().as_str(), f.data_type().clone()))
            .collect();
        assert_eq!(
            types,
            vec![
                ("user_id", DataType::Utf8),
                (
                    "event_time",
                    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
                ),
                ("purchases_30d", DataType::Int64),
                ("sessions_7d", DataType::Int32),
                ("avg_basket_eur", DataType::Float64),
                ("ctr_7d", DataType::Float32),
                ("is_premium", DataType::Boolean),
                ("favourite_category", DataType::Utf8),
                ("embedding_id", DataType::Binary),
                ("last_review_score", DataType::Float64),
                (
                    "pulsar_publish_time",
                    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
                ),
            ],
            "{where_}: column types of {file}"
        );
        assert!(
            schema.fields().iter().all(|f| f.is_nullable()),
            "{where_}: every column of the table is nullable"
        );
        let times = batch.column(1).as_primitive::<TimestampMicrosecondType>();
        let purchases = batch.column(2).as_primitive::<Int64Type>();
        let published = batch.column(10).as_primitive::<TimestampMicrosecondType>();
        for row in 0..batch.num_rows() {
            let i = u64::try_from(times.value(row) / 1000 - BASE_MS).expect("event index");
            assert!(
                published.value(row) > 1_700_000_000_000_000,
                "{where_}: the publish time is the broker's"
            );
            assert!(seen.insert(i), "{where_}: event {i} appears twice");
            assert_eq!(
                batch.column(0).as_string::<i32>().value(row),
                format!("user-{}", i % ENTITIES)
            );
            assert_eq!(
                batch.column(9).is_null(row),
                i % 10 == 9,
                "{where_}: null pattern of event {i}"
            );
            purchases_sum += purchases.value(row);
        }
    }
    assert_eq!(seen.len() as u64, EVENTS, "{where_}: distinct events");
    let expected_sum: i64 = (0..EVENTS as i64).map(|i| i * 3).sum();
    assert_eq!(
        purchases_sum, expected_sum,
        "{where_}: purchases_30d column sum"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_reach_redis_local_disk_and_s3() {
    let project = Project::new(&redis_url());
    let run = unique("e2e");
    let local_prefix = format!("{run}l");
    let s3_prefix = format!("{run}s");
    // A rollover overshoots `rollover_rows` by up to one batch: batches of 1,000 keep the
    // 4,000-row rollovers at 4,000-4,999 rows, so that 10,000 rows make at least 3 files.
    project.pipeline_with_source(
        "to_local",
        "  max_batch_messages: 1000\n",
        &format!("online:\n  key_prefix: {local_prefix}\n  ttl: 1h"),
        "offline:\n  url: file://offline\n  rollover_rows: 4000\n  rollover_interval: 2s",
    );
    project.pipeline(
        "to_s3",
        &format!("online:\n  key_prefix: {s3_prefix}"),
        &format!("offline:\n  url: s3://{S3_BUCKET}/{run}\n  rollover_rows: 100000\n  rollover_interval: 2s"),
    );
    project.produce("to_local", EVENTS, ENTITIES, BASE_MS, 0);

    let mut connector = project.start();
    let topic = project.topic.clone();
    wait_until(
        "every subscription to drain",
        Duration::from_secs(120),
        || {
            let topic = topic.clone();
            connector.assert_running();
            async move {
                // The default delivery: one subscription per pipeline feeds both sinks.
                for sub in ["to_local", "to_s3"] {
                    if backlog(&topic, sub).await != Some(0) {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
    assert_eq!(
        project.http_get("/healthz").await,
        Some((200, "ok\n".to_string()))
    );
    assert_eq!(
        project.http_get("/readyz").await,
        Some((200, "ready\n".to_string()))
    );
    let (status, metrics) = project
        .http_get("/metrics")
        .await
        .expect("metrics endpoint");
    assert_eq!(status, 200);
    // Per-lane metrics carry the lane's sinks (`online+offline`), per-sink ones the sink.
    for line in [
        r#"feature_connector_messages_acked_total{pipeline="to_local",sink="online+offline"} 10000"#,
        r#"feature_connector_messages_acked_total{pipeline="to_s3",sink="online+offline"} 10000"#,
        r#"feature_connector_rows_written_total{pipeline="to_s3",sink="online"} 10000"#,
        r#"feature_connector_freshness_publish_time_seconds_count{pipeline="to_local",sink="online"} 10000"#,
        r#"feature_connector_freshness_event_time_seconds_count{pipeline="to_local",sink="online"} 10000"#,
    ] {
        assert!(
            metrics.contains(line),
            "{line} missing from /metrics:\n{metrics}"
        );
    }
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "connector exit code; log:\n{log}");
    for sub in ["to_local", "to_s3"] {
        assert_eq!(
            backlog(&project.topic, sub).await,
            Some(0),
            "backlog of {sub} after stop"
        );
    }

    let mut redis = redis(&redis_url()).await;
    for (prefix, view) in [(&local_prefix, "to_local"), (&s3_prefix, "to_s3")] {
        let keys: Vec<String> = redis
            .keys(format!("{prefix}:{view}:*"))
            .await
            .expect("keys");
        assert_eq!(
            keys.len() as u64,
            ENTITIES,
            "entities in Redis under {prefix}"
        );
        for entity in 0..ENTITIES {
            let key = format!("{prefix}:{view}:user-{entity}");
            let stored: HashMap<String, Vec<u8>> = redis.hgetall(&key).await.expect("hgetall");
            let last = EVENTS - ENTITIES + entity;
            assert_eq!(normalise(stored), expected_hash(last), "hash {key}");
        }
    }
    let ttl: i64 = redis
        .pttl(format!("{local_prefix}:to_local:user-1"))
        .await
        .expect("pttl");
    assert!(
        ttl > 3_500_000 && ttl <= 3_600_000,
        "TTL refreshed to 1h, got {ttl} ms"
    );
    let no_ttl: i64 = redis
        .pttl(format!("{s3_prefix}:to_s3:user-1"))
        .await
        .expect("pttl");
    assert_eq!(no_ttl, -1, "no TTL configured means no expiry");

    let local_rows = read_table(&local_offline_url(&project), "to_local").await;
    check_rows(&local_rows, "local disk");
    let files: BTreeSet<&String> = local_rows.iter().map(|(f, _)| f).collect();
    assert!(
        files.len() >= 3,
        "rollover_rows 4000 over 10,000 rows makes at least 3 files, got {files:?}"
    );
    assert!(
        files
            .iter()
            .all(|f| f.starts_with("dt=") && f.contains("/hr=") && f.ends_with(".zstd.parquet")),
        "{files:?}"
    );

    let s3_rows = read_table(&s3_url(&run), "to_s3").await;
    check_rows(&s3_rows, "S3");
}
