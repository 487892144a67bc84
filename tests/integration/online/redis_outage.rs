//! Redis goes away while batches are written, with `delivery: per_sink` (one subscription
//! per sink): nothing is acknowledged on the online subscription (the offline one goes on),
//! and once Redis is back every row lands. The shared default is in `source/delivery.rs`.

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
        let series = format!("{name}{{pipeline=\"outage\",sink=\"online\"}} ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str()))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .map_or(0, |value| value as u64)
    };
    let batches = count("feature_connector_batch_messages_count");
    let writes = count("feature_connector_sink_write_seconds_count");
    assert!(
        batches > 1 && writes < batches,
        "the batches queued during the outage are written merged: {batches} batches, {writes} writes\n{metrics}"
    );
    assert_eq!(connector.stop(), 0);
}
