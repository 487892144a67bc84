//! `serving.cache_entities` against the real binary and Redis: a read served from the
//! cache never outlives a change in Redis, whoever makes it (the connector's own script
//! writes, another client's `HSET`, `DEL`, an expiry, writes made while its connection was
//! down), and an entity read while missing is found once it is written.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::common::*;

/// `/v1/features/cached?user_id=<user>` through the serving listener, as JSON.
async fn read(project: &Project, user: &str) -> Value {
    let (status, body) = project
        .serving_get(&format!("/v1/features/cached?user_id={user}"))
        .await
        .expect("serving listener");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Value of the sample `series` (name and labels) in the exposition `metrics`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// The freshness gauges hold the newest event (`BASE + 19` ms of the 20 produced) and its
/// age; a Feast read of two stored users and a missing one counts 2 `PRESENT` and 1
/// `NOT_FOUND` rows on top of the two `/v1/features` reads of user-1 before it.
async fn assert_freshness_and_coverage(project: &Project) {
    let body = json!({"features": ["cached:purchases_30d"],
                      "entities": {"user_id": ["user-1", "user-2", "user-404"]}});
    let response = feature_connector::tls::http_client()
        .post(project.serving_url("/get-online-features"))
        .json(&body)
        .send()
        .await
        .expect("get-online-features");
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(
        answer["results"][1]["statuses"],
        json!(["PRESENT", "PRESENT", "NOT_FOUND"]),
        "{answer}"
    );
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    let rows = |status: &str| {
        sample(
            &metrics,
            &format!(r#"feature_connector_serving_rows_total{{view="cached",status="{status}"}}"#),
        )
    };
    assert_eq!(
        (rows("PRESENT"), rows("NOT_FOUND")),
        (Some(4.0), Some(1.0)),
        "{metrics}"
    );
    let newest = sample(
        &metrics,
        r#"feature_connector_online_newest_event_time_seconds{pipeline="cached"}"#,
    );
    assert_eq!(newest, Some((BASE + 19) as f64 / 1000.0), "{metrics}");
    let age = sample(
        &metrics,
        r#"feature_connector_newest_event_age_seconds{pipeline="cached"}"#,
    )
    .expect("newest_event_age_seconds");
    let expected = (chrono::Utc::now().timestamp_millis() - BASE - 19) as f64 / 1000.0;
    assert!(
        (expected - 60.0..=expected + 1.0).contains(&age),
        "age {age}, expected about {expected}"
    );
}

/// The cache's answer must follow Redis with no wait: every read after a change sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_reads_follow_every_change_in_redis() {
    let prefix = unique("cache");
    let project = Project::new(&redis_url());
    project.pipeline(
        "cached",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  enabled: false",
    );
    project.serving_extra("  cache_entities: 1000");
    project.produce("cached", 20, 5, BASE, 0);
    let connector = project.start();
    wait_drained(&project.topic, &["cached"], Duration::from_secs(60)).await;
    let mut redis = redis(&redis_url()).await;
    let key = format!("{prefix}:cached:user-1");

    // Read twice: the second answer comes from the cache.
    for _ in 0..2 {
        let body = read(&project, "user-1").await;
        assert_eq!(body["found"], json!(true), "{body}");
        assert_eq!(body["features"]["purchases_30d"], json!(16 * 3), "{body}");
    }

    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    assert!(
        metrics.contains(r#"feature_connector_serving_cache_reads_total{outcome="hit"} 1"#)
            && metrics.contains(r#"feature_connector_serving_cache_reads_total{outcome="miss"} 1"#),
        "{metrics}"
    );
    assert_freshness_and_coverage(&project).await;

    // A dropped connection hears of no writes: the next read connects again rather than
    // answer from what it cached. (Redis marks the connections with tracking on `t`.)
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut redis)
        .await
        .expect("client list");
    let tracking: Vec<&str> = clients
        .lines()
        .filter(|line| {
            line.split(' ')
                .any(|f| f.starts_with("flags=") && f.contains('t'))
        })
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .collect();
    assert!(
        !tracking.is_empty(),
        "no client with tracking on:\n{clients}"
    );
    for id in tracking {
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query_async(&mut redis)
            .await
            .expect("client kill");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let () = redis.hset(&key, "purchases_30d", "3").await.expect("hset");
    let body = read(&project, "user-1").await;
    assert_eq!(body["features"]["purchases_30d"], json!(3), "{body}");

    // Another client's write.
    let () = redis.hset(&key, "purchases_30d", "7").await.expect("hset");
    let body = read(&project, "user-1").await;
    assert_eq!(body["features"]["purchases_30d"], json!(7), "{body}");

    // The connector's own latest-wins script, for newer events.
    project.produce("cached", 40, 5, BASE + 3_600_000, 0);
    wait_drained(&project.topic, &["cached"], Duration::from_secs(60)).await;
    let body = read(&project, "user-1").await;
    assert_eq!(body["features"]["purchases_30d"], json!(36 * 3), "{body}");

    // Deleted, then expired: not found.
    let () = redis.del(&key).await.expect("del");
    let body = read(&project, "user-1").await;
    assert_eq!(body["found"], json!(false), "{body}");
    let expiring = format!("{prefix}:cached:user-2");
    assert_eq!(read(&project, "user-2").await["found"], json!(true));
    let () = redis.pexpire(&expiring, 300).await.expect("pexpire");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let body = read(&project, "user-2").await;
    assert_eq!(body["found"], json!(false), "{body}");

    // Read while missing (cached as missing), then written: found.
    let body = read(&project, "user-99").await;
    assert_eq!(body["found"], json!(false), "{body}");
    let () = redis
        .hset_multiple(
            format!("{prefix}:cached:user-99"),
            &[
                ("purchases_30d", "5"),
                ("_ts", &(BASE + 7_200_000).to_string()),
            ],
        )
        .await
        .expect("hset");
    let body = read(&project, "user-99").await;
    assert_eq!(body["found"], json!(true), "{body}");
    assert_eq!(body["features"]["purchases_30d"], json!(5), "{body}");
    assert_eq!(connector.stop(), 0);
}
