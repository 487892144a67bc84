//! Subscription behaviour against the real broker: every producer codec decodes, Failover
//! moves to the standby replica without losing anything (one subscription per sink, and the
//! shared default's single subscription), a second Exclusive consumer is refused with a clear
//! error, Key_Shared replicas split the keys. With only the online sink, the default
//! `delivery: shared` subscribes as `<subscription>` with the configured type.

use std::time::{Duration, Instant};

use crate::common::*;

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
        // Every other codec through several producers side by side: still every event once.
        let producers = if k % 2 == 1 { "3" } else { "1" };
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
                "--producers",
                producers,
            ],
        );
    }
    let connector = project.start();
    wait_drained(&project.topic, &["codec"], Duration::from_secs(60)).await;
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
    // `fo-online` (Failover as configured) and `fo-offline` (Failover) move independently.
    failover_to_the_standby("per_sink", &["fo-offline", "fo-online"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_moves_the_shared_subscription_to_the_standby() {
    // The default: one Failover subscription `fo` feeds both sinks of each replica.
    failover_to_the_standby("shared", &["fo"]).await;
}

/// Two replicas of a pipeline with both sinks and `subscription_type: Failover`: the active
/// one is SIGKILLed mid-stream and the standby finishes; the topic's subscriptions must be
/// exactly `expected` (sorted) and drain.
async fn failover_to_the_standby(delivery: &str, expected: &[&str]) {
    const EVENTS: u64 = 20_000;
    const ENTITIES: u64 = 1_000;
    let project = Project::new(&redis_url());
    let prefix = unique("fo");
    std::fs::write(
        project.path().join("connectors/fo.yaml"),
        format!(
            "name: fo\nsource:\n  topic: {}\n  subscription: fo\n  subscription_type: Failover\n  delivery: {delivery}\n  max_batch_messages: 100\nschema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  event_time: event_time\nonline:\n  key_prefix: {prefix}\noffline:\n  url: file://offline\n  rollover_rows: 1000\n  rollover_interval: 1s\n",
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
            let first = expected[0];
            async move { backlog(&topic, first).await.is_some_and(|b| b < EVENTS) }
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
    wait_drained(&project.topic, expected, Duration::from_secs(90)).await;
    assert_eq!(
        subscriptions(&project.topic).await,
        expected,
        "the subscriptions of `delivery: {delivery}`"
    );
    let log = standby.log();
    assert_eq!(standby.stop(), 0, "{log}");
    assert_newest_values(&prefix, "fo", EVENTS, ENTITIES).await;
    // The standby re-reads the committed files when it takes the partition over, so files
    // the killed replica committed but did not acknowledge are not written twice.
    assert_eq!(
        unique_events(&local_offline_url(&project), "fo").await,
        EVENTS as usize
    );
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
        async move { backlog(&topic, "ex").await.is_some() }
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
    assert!(stderr.contains("cannot subscribe `ex`"), "{stderr}");
    assert_eq!(first.stop(), 0);
}

/// Entity keys a replica's trace log shows it received.
fn keys_received(log: &str) -> std::collections::HashSet<String> {
    log.lines()
        .filter(|line| line.contains("message received"))
        .filter_map(|line| {
            let rest = &line[line.find("key=")? + 4..];
            let value = rest.split_whitespace().next()?;
            Some(value.trim_matches('"').to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_shared_replicas_split_the_keys_and_each_key_goes_to_one_replica() {
    const EVENTS: u64 = 10_000;
    const ENTITIES: u64 = 1_000;
    let project = Project::new(&redis_url());
    let prefix = unique("ks");
    project.pipeline(
        "ks",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  enabled: false",
    );
    let trace = (
        "RUST_LOG",
        "info,pulsar=warn,feature_connector::pipeline::lane=trace",
    );
    let first_port = free_port().to_string();
    let second_port = free_port().to_string();
    let first_bind = format!("127.0.0.1:{first_port}");
    let second_bind = format!("127.0.0.1:{second_port}");
    let first = project.start_with_env("first.log", &[trace, ("FC_HTTP_BIND", &first_bind)]);
    let second = project.start_with_env("second.log", &[trace, ("FC_HTTP_BIND", &second_bind)]);
    for bind in [&first_bind, &second_bind] {
        wait_until(
            &format!("{bind} ready"),
            Duration::from_secs(60),
            || async move {
                match get_url(format!("http://{bind}/readyz")).await {
                    Ok(response) => response.status().is_success(),
                    Err(_) => false,
                }
            },
        )
        .await;
    }
    // Both consumers are attached before the first message: the hash ranges never move.
    // Unbatched: the broker routes a whole producer batch by one key, so Key_Shared needs
    // key-based batching (which pulsar-rs producers lack) or none.
    project.produce("ks", EVENTS, ENTITIES, BASE, 0);
    wait_drained(&project.topic, &["ks"], Duration::from_secs(90)).await;
    let (first_log, second_log) = (first.log(), second.log());
    assert_eq!(first.stop(), 0, "{first_log}");
    assert_eq!(second.stop(), 0, "{second_log}");
    let (a, b) = (keys_received(&first_log), keys_received(&second_log));
    assert!(
        !a.is_empty() && !b.is_empty(),
        "one replica got nothing: {} / {}",
        a.len(),
        b.len()
    );
    let shared: Vec<&String> = a.intersection(&b).collect();
    assert!(shared.is_empty(), "keys seen by both replicas: {shared:?}");
    assert_eq!(a.len() + b.len(), ENTITIES as usize);
    println!("Key_Shared split: {} keys / {} keys", a.len(), b.len());
    assert_newest_values(&prefix, "ks", EVENTS, ENTITIES).await;
}
