//! Sources: where messages come from, and how they are acknowledged once durable.

mod in_order;
mod position;

mod skipped;

use std::time::Duration;

use async_trait::async_trait;

pub use self::in_order::InOrder;
pub use self::position::{
    between_entries, continues_key, distinct_streams, same_stream, stream_runs, MessagePosition,
    OfflineOrigins, Offset, Origin, StreamNames, WHOLE_ENTRY,
};
pub use self::skipped::{SkippedEntries, SkippedEntriesError};

/// Why a source could not deliver or acknowledge messages; the technology's own error (e.g.
/// the Pulsar client's) is kept as the cause.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct SourceError(pub Box<dyn std::error::Error + Send + Sync + 'static>);

/// One message as it came off the topic.
#[derive(Debug, Clone)]
pub struct SourceMessage {
    /// Where it is in the topic; handed back to [`Source::ack`] once durable.
    pub position: MessagePosition,
    /// The payload bytes (an Avro datum or JSON document).
    pub payload: Vec<u8>,
    /// Registry version of the schema the producer wrote with, if it used one.
    pub schema_version: Option<i64>,
    /// The message key (normally the entity key).
    pub key: Option<String>,
    /// Broker publish time, epoch milliseconds.
    pub publish_time_ms: u64,
    /// Producer properties.
    pub properties: Vec<(String, String)>,
}

/// How a lane acknowledges durable messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// Each message is acknowledged on its own (Shared/Key_Shared friendly).
    Individual,
    /// The newest durable position acknowledges everything before it (Failover/Exclusive).
    Cumulative,
}

/// A stream of messages that are acknowledged only once every sink has them durably.
#[async_trait]
pub trait Source: Send {
    /// Waits for at least one message (or `idle`, returning an empty batch), then collects
    /// more until `max` messages or `linger` has passed.
    async fn next_batch(
        &mut self,
        max: usize,
        linger: Duration,
        idle: Duration,
    ) -> Result<Vec<SourceMessage>, SourceError>;

    /// Acknowledges messages that are durable in the sink, in the order they were received.
    async fn ack(&mut self, positions: &[MessagePosition]) -> Result<(), SourceError>;

    /// Whether a finite source (a backfill's readers) has handed on everything; the lane
    /// then flushes its sinks and stops.
    fn exhausted(&self) -> bool {
        false
    }

    /// Closes the subscription's consumer (acks already sent stay sent).
    async fn close(&mut self);
}
