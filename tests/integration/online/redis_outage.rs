//! Redis goes away while batches are written, with `delivery: per_sink` (one subscription
//! per sink): nothing is acknowledged on the online subscription (the offline one goes on),
//! and once Redis is back every row lands. The shared default is in `source/delivery.rs`.
//! Redis refusing writes (maxmemory reached) shows as a stalled lane in `/readyz` and
//! `ack_wait_seconds`, and loses nothing either.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_acked_while_redis_is_down_and_everything_lands_after() {
    const EVENTS: u64 = 2_000;
    const ENTITIES: u64 = 200;
    const BASE_MS: i64 = 1_790_000_000_000;
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let project = Project::new(&url);
    let redis_dir = tempfile::tempdir().expect("redis dir");
    let server = PrivateRedis::start(port, redis_dir.path())
        .ready(&url)
        .await;

    // Batches of 100: while Redis is down they wait in the sink's queue, and are written
    // merged once it is back.
    project.pipeline_with_source(
        "outage",
        "  delivery: per_sink\n  max_batch_messages: 100\n",
        "online:\n  key_prefix: out",
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    let mut connector = project.start();
    let topic = project.topic.clone();
    wait_until("subscriptions to exist", Duration::from_secs(60), || {
        let topic = topic.clone();
        async move {
            backlog(&topic, "outage-online").await.is_some()
                && backlog(&topic, "outage-offline").await.is_some()
        }
    })
    .await;

    server.kill();
    // Batched entries too: an entry may only be acknowledged once all its messages are.
    project.produce("outage", EVENTS, ENTITIES, BASE_MS, 50);
    // The backlog counts entries (producer batches), not messages.
    let published = backlog(&project.topic, "outage-online")
        .await
        .expect("online backlog");
    assert!(
        published >= EVENTS / 50,
        "at least one entry per 50 events, got {published}"
    );

    // The offline lane has its own subscription and goes on while Redis is down.
    wait_drained(&topic, &["outage-offline"], Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    connector.assert_running();
    assert_eq!(
        backlog(&project.topic, "outage-online").await,
        Some(published),
        "nothing may be acknowledged while Redis is down"
    );
    assert!(connector
        .log()
        .contains("Redis write failed; nothing acknowledged, retrying"));

    let _server = PrivateRedis::start(port, redis_dir.path())
        .ready(&url)
        .await;
    wait_drained(&topic, &["outage-online"], Duration::from_secs(60)).await;

    let mut redis = redis(&url).await;
    let keys: Vec<String> = redis.keys("out:outage:*").await.expect("keys");
    assert_eq!(keys.len() as u64, ENTITIES);
    for entity in 0..ENTITIES {
        let stored: HashMap<String, Vec<u8>> = redis
            .hgetall(format!("out:outage:user-{entity}"))
            .await
            .expect("hgetall");
        let last = EVENTS - ENTITIES + entity;
        assert_eq!(
            stored.get("_ts"),
            Some(&(BASE_MS + last as i64).to_string().into_bytes())
        );
        assert_eq!(
            stored.get("purchases_30d"),
            Some(&(last * 3).to_string().into_bytes())
        );
    }
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    let count = |name: &str| -> u64 {
        lane_metric(&metrics, name, "outage", "online").map_or(0, |value| value as u64)
    };
    let batches = count("feature_connector_batch_messages_count");
    let writes = count("feature_connector_sink_write_seconds_count");
    assert!(
        batches > 1 && writes < batches,
        "the batches queued during the outage are written merged: {batches} batches, {writes} writes\n{metrics}"
    );
    assert_eq!(connector.stop(), 0);
}

/// The value of `name{pipeline="…",sink="…"}` in a `/metrics` text.
fn lane_metric(metrics: &str, name: &str, pipeline: &str, sink: &str) -> Option<f64> {
    let series = format!("{name}{{pipeline=\"{pipeline}\",sink=\"{sink}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refusing_writes_shows_as_a_stalled_lane_and_loses_nothing() {
    const ENTITIES: u64 = 100;
    const EVENTS: u64 = 1_000;
    const BASE_MS: i64 = 1_790_000_000_000;
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let project = Project::new(&url);
    let redis_dir = tempfile::tempdir().expect("redis dir");
    let _server = PrivateRedis::start(port, redis_dir.path())
        .ready(&url)
        .await;
    project.pipeline(
        "oom",
        "online:\n  key_prefix: oom",
        "offline:\n  enabled: false",
    );
    let connector = project.start();
    project.produce("oom", ENTITIES, ENTITIES, BASE_MS, 10);
    wait_drained(&project.topic, &["oom"], Duration::from_secs(60)).await;

    // maxmemory reached: Redis answers every write with an OOM error, PING still answers.
    let mut admin = redis(&url).await;
    for (setting, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(setting)
            .arg(value)
            .query_async::<()>(&mut admin)
            .await
            .expect("config set");
    }
    project.produce("oom", EVENTS, ENTITIES, BASE_MS + 1_000, 10);

    // The lane waits for its sink: past its patience (30 s for the online lane) `/readyz`
    // names the stall and stays 200 (the model still reads what Redis holds).
    wait_until("the stall to show in /readyz", Duration::from_secs(90), || async {
        matches!(
            project.http_get("/readyz").await,
            Some((200, body)) if body.contains("degraded: lane oom/online: no acknowledgement for")
        )
    })
    .await;
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    let waited = lane_metric(
        &metrics,
        "feature_connector_ack_wait_seconds",
        "oom",
        "online",
    );
    let limit = lane_metric(
        &metrics,
        "feature_connector_ack_wait_limit_seconds",
        "oom",
        "online",
    );
    assert_eq!(limit, Some(30.0), "{metrics}");
    assert!(waited.is_some_and(|w| w > 30.0), "{waited:?}\n{metrics}");
    assert!(
        backlog(&project.topic, "oom").await.is_some_and(|b| b > 0),
        "nothing is acknowledged while Redis refuses writes"
    );

    // Redis takes writes again: every event lands and the stall clears.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query_async::<()>(&mut admin)
        .await
        .expect("config set");
    wait_drained(&project.topic, &["oom"], Duration::from_secs(60)).await;
    for entity in 0..ENTITIES {
        let stored: HashMap<String, Vec<u8>> = admin
            .hgetall(format!("oom:oom:user-{entity}"))
            .await
            .expect("hgetall");
        let newest = BASE_MS + 1_000 + (EVENTS - ENTITIES + entity) as i64;
        assert_eq!(stored.get("_ts"), Some(&newest.to_string().into_bytes()));
    }
    let (status, body) = project.http_get("/readyz").await.expect("readyz");
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    assert_eq!(
        lane_metric(
            &metrics,
            "feature_connector_ack_wait_seconds",
            "oom",
            "online"
        ),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(connector.stop(), 0);
}
