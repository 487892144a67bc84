//! A pipeline with count, sum, avg, max and last_k over 1 h and 1 d: events out of order,
//! some too late for every window, two stamped in the future; then the whole topic is
//! delivered again (the subscription rewound) and nothing counts twice.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

const SCHEMA: &str = r#"{"type": "record", "name": "order", "fields": [
  {"name": "user_id", "type": "string"},
  {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "amount", "type": ["null", "double"]},
  {"name": "qty", "type": "long"},
  {"name": "item", "type": "string"}]}"#;

const HOUR: i64 = 3_600_000;
const MINUTE: i64 = 60_000;

/// One produced event.
#[derive(Debug, Clone)]
struct Order {
    user: String,
    at: i64,
    amount: Option<f64>,
    qty: i64,
    item: String,
}

/// The sawtooth window of `length` at `t`, with the hop the connector documents: events in
/// `[floor((t − length) / hop) · hop, floor(t / hop) · hop + hop)`.
fn covered(length: i64, t: i64, at: i64) -> bool {
    let hop = if length >= 12 * 24 * HOUR {
        24 * HOUR
    } else if length >= 12 * HOUR {
        HOUR
    } else {
        5 * MINUTE
    };
    let start = (t - length).div_euclid(hop) * hop;
    let end = t.div_euclid(hop) * hop + hop;
    (start..end).contains(&at)
}

/// Every feature of `user` at `t`, worked out from the events.
fn expected(orders: &[Order], user: &str, t: i64) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (suffix, length) in [("1h", HOUR), ("1d", 24 * HOUR)] {
        let mut mine: Vec<&Order> = orders
            .iter()
            .filter(|o| o.user == user && covered(length, t, o.at))
            .collect();
        let amounts: Vec<f64> = mine.iter().filter_map(|o| o.amount).collect();
        out.insert(format!("orders_{suffix}"), json!(mine.len()));
        out.insert(
            format!("spend_{suffix}"),
            json!(amounts.iter().sum::<f64>()),
        );
        out.insert(
            format!("max_qty_{suffix}"),
            mine.iter()
                .map(|o| o.qty)
                .max()
                .map_or(Value::Null, |m| json!(m)),
        );
        if suffix == "1d" {
            let mean =
                (!amounts.is_empty()).then(|| amounts.iter().sum::<f64>() / amounts.len() as f64);
            out.insert("avg_amount_1d".into(), json!(mean));
            mine.sort_by_key(|o| std::cmp::Reverse(o.at));
            let last: Vec<&str> = mine.iter().take(3).map(|o| o.item.as_str()).collect();
            out.insert("last_items_1d".into(), json!(last));
        }
    }
    out
}

/// Floats within 1e-9 relative; everything else exactly.
fn same(got: &Value, want: &Value) -> bool {
    match (got.as_f64(), want.as_f64()) {
        (Some(g), Some(w)) if got.is_f64() || want.is_f64() => {
            (g - w).abs() <= 1e-9 * w.abs().max(1.0)
        }
        _ => got == want,
    }
}

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
                    same(got, want),
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
    project.schema_file("orders.avsc", SCHEMA);
    let prefix = unique("agg");
    let yaml = format!(
        "name: orders\nsource:\n  topic: {topic}\n  subscription: orders\n  initial_position: earliest\n\
         schema:\n  file: schemas/orders.avsc\n  format: json\n\
         entity:\n  keys: [user_id]\n  event_time: event_time\nfeatures: all\n\
         online:\n  key_prefix: {prefix}\noffline:\n  enabled: false\n\
         aggregations:\n\
         \x20 - {{name: orders, function: count, windows: [1h, 1d]}}\n\
         \x20 - {{name: spend, function: sum, column: amount, windows: [1h, 1d]}}\n\
         \x20 - {{name: avg_amount, function: avg, column: amount, windows: [1d]}}\n\
         \x20 - {{name: max_qty, function: max, column: qty, windows: [1h, 1d]}}\n\
         \x20 - {{name: last_items, function: last_k, k: 3, column: item, windows: [1d]}}\n",
        topic = project.topic
    );
    std::fs::write(project.path().join("connectors/orders.yaml"), yaml).expect("pipeline");
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
    let mut seed = 7_u64;
    let mut next = move |below: i64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as i64).rem_euclid(below)
    };
    let orders: Vec<Order> = (0..420)
        .map(|i| Order {
            user: users[i % 4].clone(),
            at: if i < 400 {
                now - next(25 * HOUR)
            } else {
                now - 2 * 24 * HOUR - next(24 * HOUR)
            },
            amount: (i % 9 != 0).then(|| next(100_000) as f64 / 100.0),
            qty: next(20) - 5,
            item: format!("item-{}", next(50)),
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
    let payload = |o: &Order| {
        json!({"user_id": o.user, "event_time": o.at, "amount": o.amount, "qty": o.qty, "item": o.item})
            .to_string()
            .into_bytes()
    };
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
