//! `delivery: shared`, the default: one durable subscription named exactly `<subscription>`
//! feeds both sinks (each event delivered and decoded once), and a message is acknowledged
//! only once every sink has it durable, so Redis being down holds the whole backlog (the
//! offline sink could write, but nothing is acknowledged) and nothing is lost. The
//! independent `per_sink` subscriptions are in `offline/store_outage.rs` and
//! `online/redis_outage.rs`.

use std::time::Duration;

use redis::AsyncCommands;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_subscription_feeds_both_sinks_by_default() {
    const EVENTS: u64 = 2_000;
    const ENTITIES: u64 = 200;
    let project = Project::new(&redis_url());
    let prefix = unique("sh");
    project.pipeline(
        "sh",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    project.produce("sh", EVENTS, ENTITIES, BASE, 50);
    let connector = project.start();
    let topic = project.topic.clone();
    wait_drained(&topic, &["sh"], Duration::from_secs(60)).await;
    // No `-online` / `-offline` subscriptions: the one subscription, named as configured,
    // Failover because the offline sink acknowledges cumulatively.
    assert_eq!(subscriptions(&topic).await, ["sh"]);
    assert_eq!(
        subscription_type(&topic, "sh").await.as_deref(),
        Some("Failover")
    );
    // Delivered and decoded once for both sinks: one lane, named after both.
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    for line in [
        format!(
            r#"feature_connector_messages_received_total{{pipeline="sh",sink="online+offline"}} {EVENTS}"#
        ),
        format!(
            r#"feature_connector_messages_acked_total{{pipeline="sh",sink="online+offline"}} {EVENTS}"#
        ),
    ] {
        assert!(metrics.contains(&line), "{line} missing from:\n{metrics}");
    }
    for lane in ["online", "offline"] {
        let line =
            format!(r#"feature_connector_messages_received_total{{pipeline="sh",sink="{lane}"}}"#);
        assert!(!metrics.contains(&line), "no lane of its own: {line}");
    }
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
    assert_eq!(subscriptions(&topic).await, ["sh"]);
    assert_eq!(backlog(&topic, "sh").await, Some(0));
    assert_newest_values(&prefix, "sh", EVENTS, ENTITIES).await;
    assert_eq!(
        unique_events(&local_offline_url(&project), "sh").await,
        EVENTS as usize
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_subscription_acknowledges_nothing_while_redis_is_down() {
    const EVENTS: u64 = 1_000;
    const ENTITIES: u64 = 100;
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let project = Project::new(&url);
    let redis_dir = tempfile::tempdir().expect("redis dir");
    let server = PrivateRedis::start(port, redis_dir.path())
        .ready(&url)
        .await;
    // Batches of at most 50 events for 100 entities: each batch holds 50 distinct entities,
    // so written one by one they would be one HSET per event.
    project.pipeline_with_source(
        "so",
        "  max_batch_messages: 50\n",
        "online:\n  key_prefix: so",
        // Every write commits: the offline sink makes rows durable while Redis is down.
        "offline:\n  url: file://offline\n  rollover_rows: 1\n  rollover_interval: 1s",
    );
    let mut connector = project.start();
    let topic = project.topic.clone();
    wait_until("the subscription to exist", Duration::from_secs(60), || {
        let topic = topic.clone();
        async move { backlog(&topic, "so").await.is_some() }
    })
    .await;
    assert_eq!(subscriptions(&topic).await, ["so"]);

    server.kill();
    // Unbatched: the backlog (which counts entries) is the number of events.
    project.produce("so", EVENTS, ENTITIES, BASE, 0);
    assert_eq!(backlog(&topic, "so").await, Some(EVENTS));
    wait_until(
        "the Redis write to fail",
        Duration::from_secs(30),
        || async {
            connector
                .log()
                .contains("Redis write failed; nothing acknowledged, retrying")
        },
    )
    .await;
    let store = local_offline_url(&project);
    let created = project
        .path()
        .join("offline/so/_delta_log/00000000000000000000.json");
    wait_until(
        "the offline sink to commit while Redis is down",
        Duration::from_secs(30),
        || {
            let (created, store) = (created.clone(), store.clone());
            async move { created.exists() && unique_events(&store, "so").await > 0 }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    connector.assert_running();
    // The offline sink has rows durable, but the shared subscription acknowledges a message
    // only once every sink has it.
    assert_eq!(
        backlog(&topic, "so").await,
        Some(EVENTS),
        "nothing may be acknowledged while Redis is down"
    );

    let _server = PrivateRedis::start(port, redis_dir.path())
        .ready(&url)
        .await;
    wait_drained(&topic, &["so"], Duration::from_secs(60)).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
    assert_eq!(subscriptions(&topic).await, ["so"]);

    let mut redis = redis(&url).await;
    let keys: Vec<String> = redis.keys("so:so:*").await.expect("keys");
    assert_eq!(keys.len() as u64, ENTITIES);
    assert_newest_values_in(&url, "so", "so", EVENTS, ENTITIES).await;
    assert_eq!(unique_events(&store, "so").await, EVENTS as usize);
    // The batches that waited in the Redis sink's queue were written merged, the newest
    // value per entity once, instead of an HSET per event (850 to 950 with merging
    // disabled). The count depends on timing: the batches the sink took before Redis came
    // back (4 in flight and one waiting for room, 50 entities each) are written as they
    // are, and what the lane queued meanwhile is merged (100 to 400 seen).
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis)
        .await
        .expect("INFO commandstats");
    let hsets: u64 = stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_hset:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .expect("cmdstat_hset in INFO commandstats");
    println!("Redis outage: {hsets} HSETs for {EVENTS} events");
    assert!(
        hsets <= EVENTS / 2,
        "{hsets} HSETs for {EVENTS} events: the queued batches were not merged"
    );
}
