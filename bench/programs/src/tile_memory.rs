//! Redis memory of one entity's aggregation tiles at their fullest (bench/aggregations.py):
//! the pipeline's aggregations from its file, an event every `--every` over `--days` days
//! (so every tile of every window is there), kept and evicted as the connector keeps them,
//! written as the connector writes them, then `MEMORY USAGE` of the hash.
//!
//! ```text
//! cargo run --profile dist -p feature-connector-bench --bin tile_memory -- \
//!   --root bench --pipeline bench --redis redis://127.0.0.1:6379 [--every 20m --days 31]
//! ```
//!
//! Prints one JSON line: events, tiles, the bytes of the tiles and positions fields, and
//! Redis's `MEMORY USAGE` of the key.

#![allow(clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use feature_connector::aggregate::{AppliedPositions, Datum, Event, Tiles};
use feature_connector::redis::tiles::{POSITIONS_FIELD, TILES_FIELD, VERSION_FIELD};

/// Options.
#[derive(Debug, Parser)]
struct Args {
    /// Project root (connectors/ inside).
    #[arg(long)]
    root: PathBuf,
    /// Pipeline whose aggregations to keep.
    #[arg(long)]
    pipeline: String,
    /// Redis URL.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// One event this often.
    #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
    every: Duration,
    /// Over this many days, up to now.
    #[arg(long, default_value_t = 31)]
    days: i64,
    /// Also write this many such entities, `{key_prefix}0` … (as the load generator names
    /// them), and leave them for a serving benchmark.
    #[arg(long, default_value_t = 0)]
    write_entities: usize,
    /// The entities' key prefix.
    #[arg(long, default_value = "entity-")]
    key_prefix: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let pipelines =
        feature_connector::config::load_pipelines(&args.root.join("connectors"), &args.root)
            .expect("pipelines load");
    let pipeline = pipelines
        .into_iter()
        .find(|p| p.name == args.pipeline)
        .expect("the pipeline");
    let layout = pipeline
        .tile_layout()
        .expect("the pipeline has aggregations");
    let specs: Vec<_> = layout
        .aggregations()
        .iter()
        .map(|a| a.spec.clone())
        .collect();
    let now = chrono::Utc::now().timestamp_millis();
    let every = i64::try_from(args.every.as_millis()).expect("interval");
    let first = now - args.days * 86_400_000;
    let mut tiles = vec![Tiles::default(); specs.len()];
    let mut positions = AppliedPositions::default();
    let messages: Vec<Vec<Event>> = (0..)
        .map(|i: i64| first + i * every)
        .take_while(|at| *at <= now)
        .enumerate()
        .map(|(i, at)| {
            layout
                .aggregations()
                .iter()
                .map(|a| Event {
                    event_time: at,
                    publish_time: at + 500,
                    value: Some(match a.kind {
                        feature_connector::aggregate::Kind::Float => Datum::Float(i as f64 * 1.37),
                        feature_connector::aggregate::Kind::Text => {
                            Datum::Text(format!("item-{}", i % 97))
                        }
                        feature_connector::aggregate::Kind::Bool => Datum::Bool(i % 2 == 0),
                        _ => Datum::Int(i64::try_from(i).expect("index") * 7 % 1_000),
                    }),
                    tie_break: i as u64,
                })
                .collect()
        })
        .collect();
    let streams: Vec<String> = (0..4)
        .map(|p| format!("persistent://public/default/bench-partition-{p}"))
        .collect();
    positions.apply_new(
        &specs,
        &mut tiles,
        messages.iter().enumerate().map(|(i, m)| {
            (
                streams[i % 4].as_str(),
                (1_000 + i as u64, i as u64, -1),
                m.as_slice(),
            )
        }),
    );
    for (spec, tiles) in specs.iter().zip(tiles.iter_mut()) {
        tiles.evict(spec, now);
    }
    let values = layout.encode(&tiles);
    let positions_bytes = feature_connector::redis::tiles::encode_positions(&positions);
    let key = layout.key(&["tile-memory-probe".to_string()]);
    let client = redis::Client::open(args.redis.as_str()).expect("redis url");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let mut hset = redis::cmd("HSET");
    hset.arg(&key)
        .arg(VERSION_FIELD)
        .arg(1)
        .arg(POSITIONS_FIELD)
        .arg(&positions_bytes)
        .arg(TILES_FIELD)
        .arg(&values);
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .expect("del");
    let _: i64 = hset.query_async(&mut connection).await.expect("hset");
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut connection)
        .await
        .expect("memory usage");
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .expect("encoding");
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .expect("del");
    let tile_bytes = values.len();
    println!(
        "{}",
        serde_json::json!({
            "events": messages.len(),
            "fields": 3,
            "tiles": tiles.iter().map(Tiles::len).sum::<usize>(),
            "tile_bytes": tile_bytes,
            "positions_bytes": positions_bytes.len(),
            "memory_usage_bytes": usage,
            "encoding": encoding,
        })
    );
}
