//! The aggregations' sink against the test Redis, fed the deliveries of a partition hand-over
//! that dispatches newer messages first (as Pulsar's Failover dispatcher may): every event
//! still counts once. The broker's race is rare and cannot be forced, so the sink is driven
//! directly with those deliveries.

use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use feature_connector::aggregate::{Aggregation, AggregationSpec, Function, Kind, Output, Window};
use feature_connector::health::Health;
use feature_connector::metrics::Metrics;
use feature_connector::record::{RowBatch, RowLayout};
use feature_connector::redis::tiles::{TileLayout, TileSinkBuilder, TILES_FIELD};
use feature_connector::sink::{Sink, SinkBuilder, SinkContext};
use feature_connector::source::{MessagePosition, Offset, SkippedEntries, SkippedEntriesError};

use crate::common::redis_url;

const DAY: i64 = 24 * 3_600_000;
const PARTITION: &str = "persistent://public/default/orders-partition-0";

/// A subscription whose cursor has every entry below `done` acknowledged.
struct Cursor(Mutex<u64>);

#[async_trait]
impl SkippedEntries for Cursor {
    async fn skipped(
        &self,
        _: &str,
        gaps: &[(Offset, Offset)],
    ) -> Result<Vec<bool>, SkippedEntriesError> {
        let done = *self.0.lock().expect("lock");
        Ok(gaps.iter().map(|(_, before)| before.1 <= done).collect())
    }

    async fn done_before(&self, _: &str, first: Offset) -> Result<bool, SkippedEntriesError> {
        Ok(first.1 <= *self.0.lock().expect("lock"))
    }
}

fn context() -> SinkContext {
    let schema = Arc::new(Schema::new(vec![
        Field::new("user", DataType::Utf8, false),
        Field::new("at", DataType::Int64, false),
    ]));
    SinkContext {
        pipeline: "orders".into(),
        rows: RowLayout {
            keys: vec!["user".into()],
            event_time: "at".into(),
            features: Vec::new(),
        },
        output_schema: schema,
        schema_fingerprint: "test".into(),
        root: std::env::temp_dir(),
        metrics: Arc::new(Metrics::new()),
        health: Arc::new(Health::default()),
        cancel: CancellationToken::new(),
        offline_origins: Default::default(),
        tie_break: false,
    }
}

fn orders_per_day() -> Aggregation {
    Aggregation {
        name: "orders".into(),
        column: None,
        kind: Kind::Int,
        spec: AggregationSpec::new(
            Function::Count,
            false,
            vec![Window::new(DAY).expect("window")],
        ),
    }
}

/// Messages `entries` of the partition, each one order of user `u` a minute ago.
fn batch(entries: std::ops::RangeInclusive<u64>, now: i64) -> RowBatch {
    let entries: Vec<u64> = entries.collect();
    let users: ArrayRef = Arc::new(StringArray::from_iter_values(entries.iter().map(|_| "u")));
    let times: ArrayRef = Arc::new(Int64Array::from_iter_values(
        entries.iter().map(|_| now - 60_000),
    ));
    RowBatch {
        rows: RecordBatch::try_new(context().output_schema, vec![users, times]).expect("rows"),
        positions: entries
            .iter()
            .map(|&entry| MessagePosition {
                topic: PARTITION.into(),
                offset: (3, entry, -1),
                entry_size: None,
                origin: None,
            })
            .collect(),
        row_positions: (0..entries.len()).collect(),
        publish_times_ms: entries.iter().map(|_| (now - 1_000) as u64).collect(),
    }
}

fn entries(durable: &[MessagePosition]) -> Vec<u64> {
    durable.iter().map(|p| p.offset.1).collect()
}

/// The orders-per-day tile sink on Redis `url`, under a new key prefix starting `prefix`.
fn tile_sink(url: &str, prefix: &str) -> TileSinkBuilder {
    TileSinkBuilder {
        service: serde_saphyr::from_str(&format!("url: {url}\n")).expect("service"),
        key_prefix: format!("{prefix}-{}", uuid::Uuid::new_v4().simple()),
        aggregations: vec![orders_per_day()],
        future_skew_ms: 60_000,
    }
}

/// A replica's aggregations sink; `cursor` `None`: one that cannot tell what is done.
async fn replica(builder: &TileSinkBuilder, cursor: Option<Arc<Cursor>>) -> Box<dyn Sink> {
    let mut sink = builder.build(&context()).await.expect("sink");
    if let Some(cursor) = cursor {
        sink.set_skipped_entries(cursor);
    }
    sink
}

/// The count of user `u`'s orders the tiles give now.
async fn orders_of_u(url: &str, builder: &TileSinkBuilder) -> Output {
    let layout = TileLayout::new(&builder.key_prefix, "orders", builder.aggregations.clone());
    let key = layout.key(&["u".to_string()]);
    let client = redis::Client::open(url).expect("url");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let bytes: Option<Vec<u8>> = connection.hget(&key, TILES_FIELD).await.expect("HGET");
    let tiles = layout.decode(&key, bytes.as_deref()).expect("tiles");
    let now = chrono::Utc::now().timestamp_millis();
    layout.read(&tiles, now).remove(0)
}

#[tokio::test]
async fn a_hand_over_that_delivers_newer_messages_first_counts_every_event_once() {
    let url = redis_url();
    let now = chrono::Utc::now().timestamp_millis();
    let builder = |prefix: &str| tile_sink(&url, prefix);

    // The first replica applies entries 0..=14; the subscription has 0..=9 acknowledged.
    let cursor = Arc::new(Cursor(Mutex::new(0)));
    let ordered = builder("in-order");
    let mut first = replica(&ordered, Some(cursor.clone())).await;
    let durable = first.write(batch(0..=14, now)).await.expect("write");
    assert_eq!(entries(&durable), (0..=14).collect::<Vec<_>>());
    *cursor.0.lock().expect("lock") = 10;

    // The partition moves to a second replica. The broker first dispatches 20..=24 (its
    // read position ran ahead for the first replica), then rewinds to 10.
    let mut second = replica(&ordered, Some(cursor.clone())).await;
    let durable = second.write(batch(20..=24, now)).await.expect("write");
    assert!(entries(&durable).is_empty(), "10..=19 are not done: held");
    let durable = second.write(batch(10..=29, now)).await.expect("write");
    assert_eq!(entries(&durable), (10..=29).collect::<Vec<_>>());
    // The first replica still finishes what it had in flight: held already.
    first.write(batch(15..=19, now)).await.expect("write");
    assert_eq!(orders_of_u(&url, &ordered).await, Output::Int(30));

    // Without knowing what is done (the sink's earlier behaviour), the same deliveries lose
    // 15..=19: 20..=24 raised the entity's position past them.
    let unordered = builder("as-delivered");
    let mut first = replica(&unordered, None).await;
    first.write(batch(0..=14, now)).await.expect("write");
    let mut second = replica(&unordered, None).await;
    second.write(batch(20..=24, now)).await.expect("write");
    second.write(batch(10..=29, now)).await.expect("write");
    assert_eq!(orders_of_u(&url, &unordered).await, Output::Int(25));
}

#[tokio::test]
async fn a_replica_whose_copy_of_the_tiles_went_stale_reads_them_again() {
    let url = redis_url();
    let now = chrono::Utc::now().timestamp_millis();
    let builder = tile_sink(&url, "stale");
    let first_cursor = Arc::new(Cursor(Mutex::new(0)));
    // The first replica writes 0..=4 and keeps what it wrote.
    let mut first = replica(&builder, Some(first_cursor.clone())).await;
    first.write(batch(0..=4, now)).await.expect("write");
    // The hash is deleted, and another replica writes 5..=12 from scratch.
    let layout = TileLayout::new(&builder.key_prefix, "orders", builder.aggregations.clone());
    let client = redis::Client::open(url.as_str()).expect("url");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: i64 = connection
        .del(layout.key(&["u".to_string()]))
        .await
        .expect("DEL");
    let mut second = replica(&builder, Some(Arc::new(Cursor(Mutex::new(5))))).await;
    second.write(batch(5..=12, now)).await.expect("write");
    assert_eq!(orders_of_u(&url, &builder).await, Output::Int(8));
    // The first replica's copy (5 orders) is stale: its next event counts on top of Redis's 8.
    *first_cursor.0.lock().expect("lock") = 13;
    first.write(batch(13..=13, now)).await.expect("write");
    assert_eq!(orders_of_u(&url, &builder).await, Output::Int(9));
}
