//! Subscription behaviour against the real broker: every producer codec decodes, Failover
//! moves to the standby replica without losing anything, a second Exclusive consumer is
//! refused with a clear error.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::AsyncCommands;

use crate::common::*;

const BASE: i64 = 1_791_000_000_000;

async fn assert_newest_values(prefix: &str, view: &str, events: u64, entities: u64) {
    let mut redis = redis(&redis_url()).await;
    for entity in 0..entities {
        let stored: HashMap<String, Vec<u8>> = redis
            .hgetall(format!("{prefix}:{view}:user-{entity}"))
            .await
            .expect("hgetall");
        let newest = events - entities + entity;
        assert_eq!(
            stored.get("_ts"),
            Some(&(BASE + newest as i64).to_string().into_bytes()),
            "entity {entity}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_messages_of_every_codec_decode() {
    let project = Project::new(&redis_url());
    let prefix = unique("codec");
    project.pipeline(
        "codec",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  enabled: false",
    );
    for (k, codec) in ["none", "lz4", "zlib", "zstd", "snappy"]
        .into_iter()
        .enumerate()
    {
        let start = (k * 1000).to_string();
        project.produce_with(
            "codec",
            &[
                "--count",
                "1000",
                "--entities",
                "100",
                "--start",
                &start,
                "--base-ms",
                &BASE.to_string(),
                "--batch",
                "50",
                "--compression",
                codec,
            ],
        );
    }
    let connector = project.start();
    wait_drained(&project.topic, &["codec-online"], Duration::from_secs(60)).await;
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    assert!(
        metrics.contains(
            r#"feature_connector_rows_written_total{pipeline="codec",sink="online"} 5000"#
        ),
        "{metrics}"
    );
    assert_eq!(connector.stop(), 0);
    assert_newest_values(&prefix, "codec", 5_000, 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_moves_to_the_standby_when_the_active_replica_dies() {
    const EVENTS: u64 = 20_000;
    const ENTITIES: u64 = 1_000;
    let project = Project::new(&redis_url());
    let prefix = unique("fo");
    std::fs::write(
        project.path().join("connectors/fo.yaml"),
        format!(
            "name: fo\nsource:\n  topic: {}\n  subscription: fo\n  subscription_type: Failover\n  max_batch_messages: 100\nschema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  event_time: event_time\nonline:\n  key_prefix: {prefix}\n",
            project.topic
        ),
    )
    .expect("pipeline");
    project.produce("fo", EVENTS, ENTITIES, BASE, 0);
    let active = project.start();
    wait_until(
        "the active replica to start",
        Duration::from_secs(30),
        || {
            let topic = project.topic.clone();
            async move {
                backlog(&topic, "fo-online")
                    .await
                    .is_some_and(|b| b < EVENTS)
            }
        },
    )
    .await;
    let standby_port = free_port().to_string();
    let standby = project.start_with_env(
        "standby.log",
        &[("FC_HTTP_BIND", &format!("127.0.0.1:{standby_port}"))],
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    active.kill_hard();
    wait_drained(&project.topic, &["fo-online"], Duration::from_secs(90)).await;
    let log = standby.log();
    assert_eq!(standby.stop(), 0, "{log}");
    assert_newest_values(&prefix, "fo", EVENTS, ENTITIES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_exclusive_consumer_is_refused_clearly() {
    let project = Project::new(&redis_url());
    std::fs::write(
        project.path().join("connectors/ex.yaml"),
        format!(
            "name: ex\nsource:\n  topic: {}\n  subscription: ex\n  subscription_type: Exclusive\nschema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  event_time: event_time\nonline:\n  key_prefix: ex\n",
            project.topic
        ),
    )
    .expect("pipeline");
    let first = project.start();
    wait_until("the first consumer", Duration::from_secs(30), || {
        let topic = project.topic.clone();
        async move { backlog(&topic, "ex-online").await.is_some() }
    })
    .await;
    let second_port = free_port().to_string();
    let mut second = project
        .command_with_env(
            &["run"],
            &[("FC_HTTP_BIND", &format!("127.0.0.1:{second_port}"))],
        )
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("second");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = second.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = second.kill();
            panic!("the second Exclusive consumer neither failed nor gave up within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut stderr)
        .expect("read");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot subscribe `ex-online`"), "{stderr}");
    assert_eq!(first.stop(), 0);
}
