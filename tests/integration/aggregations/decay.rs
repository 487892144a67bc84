//! Values fall as windows pass, with no new event: one event at the oldest 5-minute tile a
//! 1-hour window covers leaves that window at the next turn of 5 minutes, and stays in the
//! 1-day one.

use std::time::Duration;

use serde_json::{json, Value};

use super::{payload, write_orders_pipeline, Order, HOUR, MINUTE};
use crate::common::*;

const HOP: i64 = 5 * MINUTE;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn counts(project: &Project) -> (Value, Value) {
    let (status, body) = project
        .serving_get("/v1/features/orders?user_id=decay&features=orders_1h,orders_1d,spend_1h")
        .await
        .expect("http");
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).expect("json");
    (
        body["features"]["orders_1h"].clone(),
        body["features"]["orders_1d"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_window_lets_go_of_an_event_when_its_tile_leaves() {
    let project = Project::new(&redis_url());
    write_orders_pipeline(&project, "offline:\n  enabled: false");
    // Not in the last 20 s of a 5-minute slot: publishing and the first read fit before
    // the turn.
    if now_ms().rem_euclid(HOP) > HOP - 20_000 {
        tokio::time::sleep(Duration::from_millis(25_000)).await;
    }
    let now = now_ms();
    let oldest_tile = (now - HOUR).div_euclid(HOP) * HOP;
    let turn = now.div_euclid(HOP) * HOP + HOP;
    let order = Order {
        user: "decay".into(),
        at: oldest_tile,
        amount: Some(2.5),
        qty: 1,
        item: "i".into(),
    };
    publish_raw(&project.topic, vec![payload(&order)]).await;
    let connector = project.start();
    wait_drained(&project.topic, &["orders"], Duration::from_secs(60)).await;
    assert!(now_ms() < turn, "the first read must come before the turn");
    assert_eq!(counts(&project).await, (json!(1), json!(1)));

    let wait = u64::try_from(turn - now_ms() + 1_000).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    assert_eq!(counts(&project).await, (json!(0), json!(1)));
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    assert_quiet("decay run", &log);
}
