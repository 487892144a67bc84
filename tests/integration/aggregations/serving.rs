//! A pipeline with count, sum, avg, max and last_k over 1 h and 1 d: events out of order,
//! some too late for every window, two stamped in the future; then the whole topic is
//! delivered again (the subscription rewound) and nothing counts twice.

use std::time::Duration;

use serde_json::Value;

use super::{expected, payload, same, write_orders_pipeline, Order, Random, HOUR, MINUTE};
use crate::common::*;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Reads every user's features and compares them with the events' values at the time of
/// the read (tried again when a window boundary passed during the read).
async fn assert_served(project: &Project, orders: &[Order], users: &[String]) {
    for user in users {
        for attempt in 0.. {
            let before = now_ms();
            let (status, body) = project
                .serving_get(&format!("/v1/features/orders?user_id={user}"))
                .await
                .expect("http");
            let after = now_ms();
            assert_eq!(status, 200, "{body}");
            let want = expected(orders, user, before);
            if want != expected(orders, user, after) && attempt < 3 {
                continue;
            }
            let body: Value = serde_json::from_str(&body).expect("json");
            for (feature, want) in &want {
                let got = &body["features"][feature];
                assert!(
                    same(feature, got, want),
                    "{user} {feature}: served {got}, the events give {want}"
                );
            }
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn served_aggregates_equal_the_events_and_a_replay_counts_once() {
    let project = Project::new(&redis_url());
    write_orders_pipeline(&project, "offline:\n  enabled: false");
    let validated = project.validate();
    assert!(
        validated.status.success(),
        "{}",
        String::from_utf8_lossy(&validated.stderr)
    );

    // 400 events of 4 users over the last 25 hours, published out of event-time order;
    // 20 more stamped 2-3 days ago; 2 stamped 20 minutes ahead (dead-lettered: more than the
    // default 5-minute skew). An event is late (dropped and counted) when it is older than
    // the start of the 1-hour tile that held `publish time − 1 d`: the 1-day window, with
    // its 1-hour hop, is the one reaching furthest back. Publishing stays clear of the turn
    // of an hour, so that the events' publish times share that tile.
    if now_ms().rem_euclid(HOUR) > HOUR - 2 * MINUTE {
        tokio::time::sleep(Duration::from_millis(u64::try_from(2 * MINUTE).unwrap())).await;
    }
    let now = now_ms();
    let oldest_kept = (now - 24 * HOUR).div_euclid(HOUR) * HOUR;
    let users: Vec<String> = (0..4).map(|u| format!("user-{u}")).collect();
    let mut random = Random(7);
    let orders: Vec<Order> = (0..420)
        .map(|i| Order {
            user: users[i % 4].clone(),
            at: if i < 400 {
                now - random.below(25 * HOUR)
            } else {
                now - 2 * 24 * HOUR - random.below(24 * HOUR)
            },
            amount: (i % 9 != 0).then(|| random.below(100_000) as f64 / 100.0),
            qty: random.below(20) - 5,
            item: format!("item-{}", random.below(50)),
        })
        .collect();
    let future: Vec<Order> = (0..2)
        .map(|i| Order {
            user: users[i].clone(),
            at: now + 20 * MINUTE,
            amount: Some(1.0),
            qty: 99,
            item: "future".into(),
        })
        .collect();
    let mut payloads: Vec<Vec<u8>> = orders.iter().map(payload).collect();
    payloads.extend(future.iter().map(payload));
    publish_raw(&project.topic, payloads).await;

    let connector = project.start();
    wait_drained(&project.topic, &["orders"], Duration::from_secs(60)).await;
    // Late events count for no window at any time after they were published, so the values
    // are those of all the events.
    assert_served(&project, &orders, &users).await;
    let late = orders.iter().filter(|o| o.at < oldest_kept).count();
    assert!(late >= 20, "{late}");
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    let counted = |outcome: &str, n: usize| {
        metrics.contains(&format!(
            "feature_connector_aggregation_events_total{{pipeline=\"orders\",outcome=\"{outcome}\"}} {n}\n"
        ))
    };
    assert!(
        counted("applied", 420 - late) && counted("late", late),
        "{late} late expected:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("aggregation"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        metrics.contains(r#"reason="future_event_time"} 2"#),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("dead_letter"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Every message delivered again, as after a crash before any acknowledgement.
    let rewind = topic_admin_url(&project.topic, "subscription/orders/resetcursor/0");
    admin_ok(
        feature_connector::tls::http_client().post(&rewind),
        "rewind the subscription",
    )
    .await;
    wait_until(
        "the replay to be held already",
        Duration::from_secs(60),
        || async {
            let (_, metrics) = project.http_get("/metrics").await.unwrap_or_default();
            metrics.contains(r#"outcome="already_held"} 420"#)
        },
    )
    .await;
    assert_served(&project, &orders, &users).await;

    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    // Only the future events are worth a warning.
    let loud = loud_lines(&log);
    assert!(
        loud.iter()
            .all(|l| l.contains("reason=\"future_event_time\"")),
        "{loud:#?}"
    );
}

/// On a Redis Cluster each entity's tiles are one key, so one slot: updates (one per script
/// call there) and reads are routed by it.
#[tokio::test(flavor = "multi_thread")]
async fn aggregates_on_a_redis_cluster_equal_the_events() {
    let nodes = std::env::var("REDIS_CLUSTER_URLS").unwrap_or_else(|_| {
        "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".into()
    });
    let project = Project::new(&nodes);
    project.redis_extra("  mode: cluster");
    write_orders_pipeline(&project, "offline:\n  enabled: false");
    let now = now_ms();
    let mut random = Random(31);
    let users: Vec<String> = (0..12).map(|u| format!("user-{u}")).collect();
    let orders: Vec<Order> = (0..300)
        .map(|i| Order {
            user: users[i % 12].clone(),
            at: now - random.below(23 * HOUR),
            amount: Some(random.below(10_000) as f64 / 100.0),
            qty: random.below(9),
            item: format!("item-{}", random.below(40)),
        })
        .collect();
    publish_raw(&project.topic, orders.iter().map(payload).collect()).await;
    let connector = project.start();
    wait_drained(&project.topic, &["orders"], Duration::from_secs(60)).await;
    assert_served(&project, &orders, &users).await;
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    assert_quiet("aggregating run on a cluster", &log);
}
