//! Windowed aggregations against the real services: events published to Pulsar, tiles
//! kept in Redis, values read through the serving listener and compared with values worked
//! out here from the events themselves (not with the crate's tiles).

mod decay;
mod hand_over;
mod replicas;
mod serving;
mod training;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::common::{unique, Project};

pub const SCHEMA: &str = r#"{"type": "record", "name": "order", "fields": [
  {"name": "user_id", "type": "string"},
  {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "amount", "type": ["null", "double"]},
  {"name": "qty", "type": "long"},
  {"name": "item", "type": "string"}]}"#;

pub const HOUR: i64 = 3_600_000;
pub const MINUTE: i64 = 60_000;

/// One produced event.
#[derive(Debug, Clone)]
pub struct Order {
    pub user: String,
    pub at: i64,
    pub amount: Option<f64>,
    pub qty: i64,
    pub item: String,
}

/// The sawtooth window of `length` at `t`, with the hop the connector documents: events in
/// `[floor((t − length) / hop) · hop, floor(t / hop) · hop + hop)`.
pub fn covered(length: i64, t: i64, at: i64) -> bool {
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
pub fn expected(orders: &[Order], user: &str, t: i64) -> BTreeMap<String, Value> {
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
            let items: std::collections::BTreeSet<&str> =
                mine.iter().map(|o| o.item.as_str()).collect();
            out.insert("distinct_items_1d".into(), json!(items.len()));
            mine.sort_by_key(|o| std::cmp::Reverse(o.at));
            let last: Vec<&str> = mine.iter().take(3).map(|o| o.item.as_str()).collect();
            out.insert("last_items_1d".into(), json!(last));
        }
    }
    out
}

/// Floats within 1e-9 relative; estimated distinct counts (`distinct_*`, against the exact
/// count) within 3 or 8 %, some seven standard errors of the sketch at those sizes;
/// everything else exactly.
pub fn same(feature: &str, got: &Value, want: &Value) -> bool {
    if let (true, Some(g), Some(w)) = (
        feature.starts_with("distinct_"),
        got.as_i64(),
        want.as_i64(),
    ) {
        return (g - w).abs() <= 3.max(w * 8 / 100);
    }
    match (got.as_f64(), want.as_f64()) {
        (Some(g), Some(w)) if got.is_f64() || want.is_f64() => {
            (g - w).abs() <= 1e-9 * w.abs().max(1.0)
        }
        _ => got == want,
    }
}

/// Writes the project's `orders` pipeline (JSON payloads; count, sum, avg, max, last_k and
/// approx_distinct over 1 h and 1 d) with the `offline` section given; returns its online key prefix.
pub fn write_orders_pipeline(project: &Project, offline: &str) -> String {
    project.schema_file("orders.avsc", SCHEMA);
    let prefix = unique("agg");
    let yaml = format!(
        "name: orders\nsource:\n  topic: {topic}\n  subscription: orders\n  initial_position: earliest\n\
         schema:\n  file: schemas/orders.avsc\n  format: json\n\
         entity:\n  keys: [user_id]\n  event_time: event_time\nfeatures: all\n\
         online:\n  key_prefix: {prefix}\n{offline}\n\
         aggregations:\n\
         \x20 - {{name: orders, function: count, windows: [1h, 1d]}}\n\
         \x20 - {{name: spend, function: sum, column: amount, windows: [1h, 1d]}}\n\
         \x20 - {{name: avg_amount, function: avg, column: amount, windows: [1d]}}\n\
         \x20 - {{name: max_qty, function: max, column: qty, windows: [1h, 1d]}}\n\
         \x20 - {{name: last_items, function: last_k, k: 3, column: item, windows: [1d]}}\n\
         \x20 - {{name: distinct_items, function: approx_distinct, column: item, windows: [1d]}}\n",
        topic = project.topic,
    );
    std::fs::write(project.path().join("connectors/orders.yaml"), yaml).expect("pipeline");
    prefix
}

/// An order as its JSON payload.
pub fn payload(order: &Order) -> Vec<u8> {
    json!({"user_id": order.user, "event_time": order.at, "amount": order.amount, "qty": order.qty, "item": order.item})
        .to_string()
        .into_bytes()
}

/// A small deterministic generator: a number below `below`.
pub struct Random(pub u64);

impl Random {
    pub fn below(&mut self, below: i64) -> i64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as i64).rem_euclid(below)
    }
}
