//! The online store in depth: latest-wins under reordering and concurrent replicas, TTL
//! expiry, typed reads through `get` and HTTP, AUTH, and a Redis crash mid-stream.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_events_from_two_replicas_end_with_the_newest_per_entity() {
    const EVENTS: u64 = 30_000;
    const ENTITIES: u64 = 10_000;
    const BASE: i64 = 1_784_000_000_000;
    let project = Project::new(&redis_url());
    let prefix = unique("lw");
    std::fs::write(
        project.path().join("connectors/lw.yaml"),
        format!(
            "name: lw\nsource:\n  topic: {}\n  subscription: lw\n  subscription_type: Shared\n  initial_position: earliest\n  max_batch_messages: 500\nschema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  event_time: event_time\nonline:\n  key_prefix: {prefix}\n",
            project.topic
        ),
    )
    .expect("pipeline");
    project.produce_with(
        "lw",
        &[
            "--count",
            &EVENTS.to_string(),
            "--entities",
            &ENTITIES.to_string(),
            "--base-ms",
            &BASE.to_string(),
            "--shuffle",
        ],
    );
    let second_port = free_port();
    let second_bind = format!("127.0.0.1:{second_port}");
    let first = project.start();
    let second = project.start_with_env("run2.log", &[("FC_HTTP_BIND", &second_bind)]);
    let topic = project.topic.clone();
    wait_drained(&topic, &["lw"], Duration::from_secs(120)).await;

    let received = |metrics: &str| -> u64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(
                    r#"feature_connector_messages_received_total{pipeline="lw",sink="online"}"#,
                )
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let (_, one) = project.http_get("/metrics").await.expect("metrics 1");
    let two = get_url(format!("http://{second_bind}/metrics"))
        .await
        .expect("metrics 2")
        .text()
        .await
        .expect("text");
    let (a, b) = (received(&one), received(&two));
    assert!(a > 0 && b > 0, "both replicas wrote (received {a} and {b})");
    assert!(a + b >= EVENTS, "every event was received ({a} + {b})");
    assert_eq!(first.stop(), 0);
    assert_eq!(second.stop(), 0);

    let mut redis = redis(&redis_url()).await;
    let mut pipe = redis::pipe();
    for entity in 0..ENTITIES {
        pipe.cmd("HMGET")
            .arg(format!("{prefix}:lw:user-{entity}"))
            .arg("_ts")
            .arg("purchases_30d");
    }
    let rows: Vec<(Option<i64>, Option<u64>)> = pipe.query_async(&mut redis).await.expect("hmget");
    for (entity, (ts, purchases)) in rows.into_iter().enumerate() {
        let newest = EVENTS - ENTITIES + entity as u64;
        assert_eq!(
            ts,
            Some(BASE + newest as i64),
            "entity {entity}: newest event time wins"
        );
        assert_eq!(
            purchases,
            Some(newest * 3),
            "entity {entity}: values of the newest event"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_expires_and_reads_are_typed_through_get_and_http() {
    const BASE: i64 = 1_785_000_000_000;
    let project = Project::new(&redis_url());
    let prefix = unique("ttl");
    project.pipeline(
        "ttl",
        &format!("online:\n  key_prefix: {prefix}\n  ttl: 3s"),
        "offline:\n  enabled: false",
    );
    project.produce("ttl", 100, 10, BASE, 0);
    let connector = project.start();
    let topic = project.topic.clone();
    wait_drained(&topic, &["ttl"], Duration::from_secs(60)).await;

    // Entity user-7: newest event 97.
    let output = project.run_command(&[
        "get",
        "--pipeline",
        "ttl",
        "--entity",
        "user_id=user-7",
        "--features",
        "purchases_30d,is_premium,ctr_7d,favourite_category",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&output.stdout).expect("get prints JSON");
    assert_eq!(
        got,
        serde_json::json!({
            "entity": {"user_id": "user-7"},
            "found": true,
            "event_time_ms": BASE + 97,
            "features": {"purchases_30d": 291, "is_premium": false, "ctr_7d": 29.25, "favourite_category": "favourite_category-97"}
        })
    );
    let (status, body) = project
        .serving_get("/v1/features/ttl?user_id=user-1&user_id=nobody&features=sessions_7d")
        .await
        .expect("http");
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        body["results"][0]["features"]["sessions_7d"],
        serde_json::json!(94)
    );
    assert_eq!(body["results"][1]["found"], serde_json::json!(false));
    let response = feature_connector::tls::http_client()
        .post(project.serving_url("/v1/features/ttl"))
        .json(&serde_json::json!({"entities": [{"user_id": "user-2"}], "features": ["purchases_30d"]}))
        .send()
        .await
        .expect("post");
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(
        body["results"][0]["features"]["purchases_30d"],
        serde_json::json!(92 * 3)
    );
    let (status, _) = project
        .serving_get("/v1/features/ttl?user_id=user-1&features=nope")
        .await
        .expect("http");
    assert_eq!(status, 400);
    let (status, _) = project
        .serving_get("/v1/features/nope?user_id=1")
        .await
        .expect("http");
    assert_eq!(status, 404);
    assert_eq!(connector.stop(), 0);

    let mut redis = redis(&redis_url()).await;
    let ttl: i64 = redis
        .pttl(format!("{prefix}:ttl:user-7"))
        .await
        .expect("pttl");
    assert!(ttl > 0 && ttl <= 3000, "TTL set, got {ttl}");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let keys: Vec<String> = redis.keys(format!("{prefix}:ttl:*")).await.expect("keys");
    assert!(keys.is_empty(), "keys expired: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_password_comes_from_env_and_a_wrong_one_fails_at_start() {
    let port = free_port();
    let dir = tempfile::tempdir().expect("dir");
    let good = format!("redis://:s3cr3t-pw@127.0.0.1:{port}");
    let _server = PrivateRedis::start_with(
        port,
        dir.path(),
        &["--save", "", "--requirepass", "s3cr3t-pw"],
    )
    .ready(&good)
    .await;

    // The service file takes the password from the environment.
    let project = Project::new(&format!(
        "redis://:${{FC_IT_REDIS_PASSWORD}}@127.0.0.1:{port}"
    ));
    project.pipeline(
        "auth",
        "online:\n  key_prefix: auth",
        "offline:\n  enabled: false",
    );
    // Children inherit it; only this test's config names the variable.
    std::env::set_var("FC_IT_REDIS_PASSWORD", "s3cr3t-pw");
    project.produce("auth", 20, 5, 1_786_000_000_000, 0);
    let connector = project.start_with_env("run.log", &[("FC_IT_REDIS_PASSWORD", "s3cr3t-pw")]);
    let topic = project.topic.clone();
    wait_drained(&topic, &["auth"], Duration::from_secs(60)).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0);
    assert!(
        !log.contains("s3cr3t-pw"),
        "the password is never logged:\n{log}"
    );
    let mut redis = redis(&good).await;
    let keys: Vec<String> = redis.keys("auth:auth:*").await.expect("keys");
    assert_eq!(keys.len(), 5);

    let output = project
        .command_with_env(&["run"], &[("FC_IT_REDIS_PASSWORD", "wrong-pw")])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Redis refused the login"), "{stderr}");
    assert!(
        !stderr.contains("wrong-pw"),
        "the password is never printed:\n{stderr}"
    );
}

/// Redis is SIGKILLed mid-stream: the connector keeps running, acknowledges nothing Redis
/// did not confirm, and once Redis is back every entity ends with its newest event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crash_mid_stream_loses_nothing() {
    const EVENTS: u64 = 20_000;
    const ENTITIES: u64 = 2_000;
    const BASE: i64 = 1_787_000_000_000;
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("dir");
    // Durable like a production Redis: every acknowledged write is on disk.
    let durable = [
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ];
    let server = PrivateRedis::start_with(port, dir.path(), &durable)
        .ready(&url)
        .await;
    let project = Project::new(&url);
    std::fs::write(
        project.path().join("connectors/crash.yaml"),
        format!(
            "name: crash\nsource:\n  topic: {}\n  subscription: crash\n  max_batch_messages: 200\nschema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  event_time: event_time\nonline:\n  key_prefix: crash\n",
            project.topic
        ),
    )
    .expect("pipeline");
    let mut connector = project.start();
    // Events keep coming while Redis dies (4,000/s for 5 s): a connector that drained a
    // ready backlog before the test's first look could otherwise finish before the crash.
    let (events, entities, base) = (EVENTS.to_string(), ENTITIES.to_string(), BASE.to_string());
    let mut producer = project
        .command_with_env(
            &[
                "produce",
                "--pipeline",
                "crash",
                "--count",
                &events,
                "--entities",
                &entities,
                "--base-ms",
                &base,
                "--rate",
                "4000",
            ],
            &[],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start produce");
    let topic = project.topic.clone();
    wait_until("some progress", Duration::from_secs(60), || {
        let topic = topic.clone();
        async move {
            backlog(&topic, "crash").await.is_some()
                && acknowledged_prefix(&topic, "crash").await > 0
        }
    })
    .await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    connector.assert_running();
    // The connector too, so that what the broker has as acknowledged stops moving: every
    // message acknowledged by then must be in Redis's file (appendfsync always keeps each
    // write Redis confirmed). Acknowledgements leave in receive order, so the acknowledged
    // prefix (up to the cursor's mark-delete position) is what the connector vouched for.
    connector.kill_hard();
    let acked = acknowledged_prefix(&topic, "crash").await;
    assert!(
        acked < EVENTS,
        "the crash hit mid-stream ({acked} acknowledged)"
    );
    let _restarted = PrivateRedis::start_with(port, dir.path(), &durable)
        .ready(&url)
        .await;
    let mut redis = redis(&url).await;
    for entity in 0..ENTITIES.min(acked) {
        let newest_acked = entity + (acked - 1 - entity) / ENTITIES * ENTITIES;
        let stored: Option<i64> = redis
            .hget(format!("crash:crash:user-{entity}"), "_ts")
            .await
            .expect("hget");
        assert!(
            stored.is_some_and(|ts| ts >= BASE + newest_acked as i64),
            "entity {entity}: event {newest_acked} was acknowledged but Redis has {stored:?}"
        );
    }
    println!("Redis crash: {acked} of {EVENTS} acknowledged before it, all of them in Redis");

    let produced = producer.wait().expect("produce ran");
    assert!(produced.success(), "produce failed: {produced}");
    let connector = project.start();
    wait_drained(&topic, &["crash"], Duration::from_secs(90)).await;
    assert_eq!(connector.stop(), 0);
    for entity in 0..ENTITIES {
        let stored: HashMap<String, Vec<u8>> = redis
            .hgetall(format!("crash:crash:user-{entity}"))
            .await
            .expect("hgetall");
        let newest = EVENTS - ENTITIES + entity;
        assert_eq!(
            stored.get("_ts"),
            Some(&(BASE + newest as i64).to_string().into_bytes()),
            "entity {entity}"
        );
    }
}

/// Publishes 3,000 events for 1,000 entities through a pipeline and reads three back
/// with `get` (which goes through the same client setup as the sink).
async fn round_trip_through(project: &Project, name: &str) {
    const BASE: i64 = 1_788_000_000_000;
    project.pipeline(
        name,
        &format!("online:\n  key_prefix: {name}"),
        "offline:\n  enabled: false",
    );
    project.produce(name, 3_000, 1_000, BASE, 0);
    let connector = project.start();
    let topic = project.topic.clone();
    wait_drained(&topic, &[name], Duration::from_secs(60)).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
    for entity in [0u64, 417, 999] {
        let output = project.run_command(&[
            "get",
            "--pipeline",
            name,
            "--entity",
            &format!("user_id=user-{entity}"),
            "--features",
            "purchases_30d",
        ]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let got: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        let newest = 2_000 + entity;
        assert_eq!(
            got["event_time_ms"],
            serde_json::json!(BASE + newest as i64),
            "{got}"
        );
        assert_eq!(
            got["features"]["purchases_30d"],
            serde_json::json!(newest * 3),
            "{got}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_routes_every_entity() {
    let nodes = std::env::var("REDIS_CLUSTER_URLS").unwrap_or_else(|_| {
        "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".into()
    });
    let project = Project::new(&nodes);
    project.redis_extra("  mode: cluster");
    let name = unique("cl").replace('-', "_");
    round_trip_through(&project, &name).await;
    // Every entity is in the cluster, spread over its nodes.
    let client = redis::cluster::ClusterClient::builder(nodes.split(',').collect::<Vec<_>>())
        .connection_timeout(TEST_REDIS_TIMEOUT)
        .response_timeout(TEST_REDIS_TIMEOUT)
        .build()
        .expect("cluster client");
    let mut connection = client
        .get_async_connection()
        .await
        .expect("cluster connection");
    let mut per_node = Vec::new();
    for port in [7001, 7002, 7003] {
        let mut node = redis(&format!("redis://127.0.0.1:{port}")).await;
        let keys: Vec<String> = node.keys(format!("{name}:{name}:*")).await.expect("keys");
        per_node.push(keys.len());
    }
    assert_eq!(per_node.iter().sum::<usize>(), 1_000, "{per_node:?}");
    assert!(
        per_node.iter().all(|n| *n > 0),
        "keys on every node: {per_node:?}"
    );
    let ts: i64 = connection
        .hget(format!("{name}:{name}:user-5"), "_ts")
        .await
        .expect("hget");
    assert_eq!(ts, 1_788_000_000_000 + 2_005);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_with_acl_user() {
    let url = std::env::var("REDIS_TLS_URL")
        .unwrap_or_else(|_| "rediss://app:app-secret@127.0.0.1:6390".into());
    let ca = std::env::var("REDIS_TLS_CA")
        .unwrap_or_else(|_| format!("{}/.services/tls/ca.crt", env!("CARGO_MANIFEST_DIR")));
    let project = Project::new(&url);
    project.redis_extra(&format!("  tls_ca_file: {ca}"));
    round_trip_through(&project, "tls").await;
}
