//! The pipeline module's files together: the lane's acknowledgement rules (lane, ack gate,
//! sink tasks, dead letters) with an in-memory source and sinks; no services needed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lane::*;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::pulsar::{PulsarAdmin, SchemaRegistry};
use crate::record::RowBatch;
use crate::schema::TopicDecoders;
use crate::schema::{Compatibility, DecoderSpec, PayloadDecoder, PayloadFormat, ReaderSchema};
use crate::sink::{Sink, SinkError};
use crate::source::{MessagePosition, Source, SourceError, SourceMessage};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SCHEMA: &str = r#"{"type":"record","name":"r","fields":[
    {"name":"id","type":"string"},{"name":"ts","type":"long"},{"name":"v","type":"double"}]}"#;

/// What the in-memory source saw, shared with the test.
#[derive(Default)]
struct SourceLog {
    queued: VecDeque<SourceMessage>,
    acked: Vec<u64>,
    closed: bool,
}

struct MemorySource(Arc<Mutex<SourceLog>>);

#[async_trait]
impl Source for MemorySource {
    async fn next_batch(
        &mut self,
        max: usize,
        _linger: Duration,
        idle: Duration,
    ) -> Result<Vec<SourceMessage>, SourceError> {
        let batch: Vec<SourceMessage> = {
            let mut log = self.0.lock().unwrap();
            let take = max.min(log.queued.len());
            log.queued.drain(..take).collect()
        };
        if batch.is_empty() {
            tokio::time::sleep(idle.min(Duration::from_millis(5))).await;
        }
        Ok(batch)
    }

    async fn ack(&mut self, positions: &[MessagePosition]) -> Result<(), SourceError> {
        let mut log = self.0.lock().unwrap();
        log.acked.extend(positions.iter().map(|p| p.offset.1));
        Ok(())
    }

    async fn close(&mut self) {
        self.0.lock().unwrap().closed = true;
    }
}

/// When a sink reports what it took as durable.
#[derive(Clone, Copy, PartialEq)]
enum Durability {
    /// As soon as `write` returns (like the Redis sink).
    Write,
    /// On a tick once `release` is set (like a rollover, or a store that came back).
    Release,
    /// Only on flush.
    Flush,
}

#[derive(Default)]
struct SinkLog {
    rows: usize,
    release: bool,
    fail_next_write: bool,
    flushed: bool,
}

struct MemorySink {
    kind: &'static str,
    durability: Durability,
    held: Vec<MessagePosition>,
    log: Arc<Mutex<SinkLog>>,
}

impl MemorySink {
    fn boxed(kind: &'static str, durability: Durability) -> (Box<dyn Sink>, Arc<Mutex<SinkLog>>) {
        let log = Arc::new(Mutex::new(SinkLog::default()));
        let sink = MemorySink {
            kind,
            durability,
            held: Vec::new(),
            log: log.clone(),
        };
        (Box::new(sink), log)
    }
}

#[async_trait]
impl Sink for MemorySink {
    fn kind(&self) -> &'static str {
        self.kind
    }

    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        {
            let mut log = self.log.lock().unwrap();
            if std::mem::take(&mut log.fail_next_write) {
                return Err(SinkError::fatal("disk full"));
            }
            log.rows += batch.rows.num_rows();
        }
        if self.durability == Durability::Write {
            return Ok(batch.positions);
        }
        self.held.extend(batch.positions);
        Ok(Vec::new())
    }

    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        let release = self.log.lock().unwrap().release;
        if self.durability == Durability::Release && release {
            return Ok(std::mem::take(&mut self.held));
        }
        Ok(Vec::new())
    }

    async fn flush(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        self.log.lock().unwrap().flushed = true;
        Ok(std::mem::take(&mut self.held))
    }
}

fn message(entry: u64, payload: &str) -> SourceMessage {
    SourceMessage {
        position: MessagePosition {
            topic: "persistent://public/default/t".into(),
            offset: (1, entry, -1),
            entry_size: None,
            origin: None,
        },
        payload: payload.as_bytes().to_vec(),
        schema_version: None,
        key: None,
        publish_time_ms: 0,
        properties: Vec::new(),
    }
}

fn good(entry: u64) -> SourceMessage {
    message(
        entry,
        &format!(r#"{{"id":"e{entry}","ts":{entry},"v":0.5}}"#),
    )
}

fn decoders() -> TopicDecoders {
    let reader = ReaderSchema::parse(std::path::Path::new("t.avsc"), SCHEMA).unwrap();
    let spec = DecoderSpec {
        topic: "persistent://public/default/t".into(),
        reader,
        format: PayloadFormat::Json,
        compatibility: Compatibility::Backward,
        columns: vec!["id".into(), "ts".into(), "v".into()],
        entity_keys: vec!["id".into()],
        event_time: "ts".into(),
        reject_non_finite: false,
        max_future_skew_ms: None,
        capacity: 16,
    };
    // Messages carry no schema version, so the registry is never asked.
    let registry = SchemaRegistry::new(PulsarAdmin::new(
        crate::tls::http_client(),
        "http://127.0.0.1:9",
    ));
    TopicDecoders::new(PayloadDecoder::new(spec, registry).unwrap(), Vec::new())
}

struct Harness {
    source: Arc<Mutex<SourceLog>>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), LaneError>>,
}

fn start(messages: Vec<SourceMessage>, sinks: Vec<Box<dyn Sink>>) -> Harness {
    let source = Arc::new(Mutex::new(SourceLog {
        queued: messages.into(),
        ..SourceLog::default()
    }));
    let cancel = CancellationToken::new();
    let lane = Lane {
        pipeline: "p".into(),
        source: Box::new(MemorySource(source.clone())),
        decoder: decoders(),
        sinks,
        dead_letter: None,
        max_batch: 4,
        linger: Duration::from_millis(1),
        cancel: cancel.clone(),
        metrics: Arc::new(Metrics::new()),
        health: Arc::new(Health::default()),
    };
    Harness {
        source,
        cancel,
        task: tokio::spawn(lane.run()),
    }
}

impl Harness {
    fn acked(&self) -> Vec<u64> {
        self.source.lock().unwrap().acked.clone()
    }

    /// Waits (bounded) until `check` holds on the source's log.
    async fn until(&self, check: impl Fn(&SourceLog) -> bool) {
        for _ in 0..400 {
            if check(&self.source.lock().unwrap()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("condition not reached; acked {:?}", self.acked());
    }

    async fn stop(self) -> (Result<(), LaneError>, Arc<Mutex<SourceLog>>) {
        self.cancel.cancel();
        let outcome = self.task.await.unwrap();
        (outcome, self.source)
    }
}

#[tokio::test]
async fn acks_what_the_sink_made_durable_in_receive_order() {
    let (sink, log) = MemorySink::boxed("online", Durability::Write);
    let lane = start((1..=10).map(good).collect(), vec![sink]);
    lane.until(|log| log.acked.len() == 10).await;
    assert_eq!(lane.acked(), (1..=10).collect::<Vec<_>>());
    let (outcome, source) = lane.stop().await;
    outcome.unwrap();
    assert!(source.lock().unwrap().closed);
    assert_eq!(log.lock().unwrap().rows, 10);
}

#[tokio::test]
async fn two_sinks_ack_only_what_both_have() {
    let (fast, _) = MemorySink::boxed("online", Durability::Write);
    let (slow, slow_log) = MemorySink::boxed("offline", Durability::Release);
    let lane = start((1..=6).map(good).collect(), vec![fast, slow]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        lane.acked().is_empty(),
        "the slow sink has nothing durable yet"
    );
    slow_log.lock().unwrap().release = true;
    lane.until(|log| log.acked.len() == 6).await;
    assert_eq!(lane.acked(), (1..=6).collect::<Vec<_>>());
    lane.stop().await.0.unwrap();
}

#[tokio::test]
async fn a_sink_that_recovers_gets_its_messages_acked_then_and_not_before() {
    let (sink, log) = MemorySink::boxed("offline", Durability::Release);
    let lane = start((1..=3).map(good).collect(), vec![sink]);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(lane.acked().is_empty());
    lane.source.lock().unwrap().queued.extend((4..=5).map(good));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(lane.acked().is_empty());
    log.lock().unwrap().release = true;
    lane.until(|log| log.acked.len() == 5).await;
    assert_eq!(lane.acked(), vec![1, 2, 3, 4, 5]);
    lane.stop().await.0.unwrap();
}

#[tokio::test]
async fn shutdown_flushes_every_sink_and_acks_what_they_committed() {
    let (online, online_log) = MemorySink::boxed("online", Durability::Write);
    let (offline, offline_log) = MemorySink::boxed("offline", Durability::Flush);
    let lane = start((1..=7).map(good).collect(), vec![online, offline]);
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(lane.acked().is_empty());
    let (outcome, source) = lane.stop().await;
    outcome.unwrap();
    let source = source.lock().unwrap();
    assert_eq!(source.acked, (1..=7).collect::<Vec<_>>());
    assert!(source.closed);
    assert!(online_log.lock().unwrap().flushed && offline_log.lock().unwrap().flushed);
}

#[tokio::test]
async fn an_undecodable_message_is_acked_with_the_rows_and_not_written() {
    let (sink, log) = MemorySink::boxed("online", Durability::Write);
    let messages = vec![good(1), message(2, "{not json"), good(3)];
    let lane = start(messages, vec![sink]);
    lane.until(|log| log.acked.len() == 3).await;
    assert_eq!(lane.acked(), vec![1, 2, 3]);
    assert_eq!(log.lock().unwrap().rows, 2);
    lane.stop().await.0.unwrap();
}

#[tokio::test]
async fn a_fatal_sink_error_stops_the_lane_with_its_cause_and_acks_nothing_of_it() {
    let (sink, log) = MemorySink::boxed("offline", Durability::Write);
    log.lock().unwrap().fail_next_write = true;
    let lane = start((1..=2).map(good).collect(), vec![sink]);
    let outcome = tokio::time::timeout(Duration::from_secs(5), lane.task)
        .await
        .unwrap()
        .unwrap();
    let error = outcome.unwrap_err();
    assert!(
        matches!(
            &error,
            LaneError::Sink {
                sink: "offline",
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("disk full"), "{error}");
    assert!(lane.source.lock().unwrap().acked.is_empty());
    assert!(lane.source.lock().unwrap().closed);
}
