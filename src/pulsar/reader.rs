//! A finite source: every retained message of a set of topic partitions, read with
//! non-durable readers from the first message up to the last one at the time each partition
//! is opened. Backfill runs a lane over it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use pulsar::consumer::{ConsumerOptions, InitialPosition};
use pulsar::message::proto::command_subscribe::SubType;
use pulsar::message::proto::MessageIdData;
use pulsar::reader::Reader;
use pulsar::{Pulsar, TokioExecutor};

use super::{position_of, PulsarError, PulsarSource};
use super::{ReplicationConfig, StreamNaming};
use crate::source::{MessagePosition, Offset};
use crate::source::{Source, SourceError, SourceMessage};

/// Publish-time bounds of what a reader source hands on (epoch ms, inclusive).
#[derive(Debug, Clone, Copy, Default)]
pub struct PublishRange {
    /// Messages published before this are read but skipped.
    pub from_ms: Option<u64>,
    /// The partition ends at the first message published after this.
    pub to_ms: Option<u64>,
}

/// How long a reader may go without a message (or an answer) before it is reopened: a
/// pulsar-rs reader can stall for good on a busy broker.
const STALL: Duration = Duration::from_secs(20);

/// Reads partitions one after the other; acknowledgements are not needed (nothing durable
/// on the broker side) and do nothing.
pub struct PulsarReaderSource {
    pulsar: Pulsar<TokioExecutor>,
    partitions: std::iter::Peekable<std::vec::IntoIter<String>>,
    /// The offset handed on last in the partition being read (to skip after a reopen).
    handed: Option<Offset>,
    range: PublishRange,
    current: Option<OpenPartition>,
    exhausted: bool,
    read: Arc<AtomicU64>,
    names: StreamNaming,
}

struct OpenPartition {
    name: String,
    reader: Reader<Vec<u8>, TokioExecutor>,
    last: MessageIdData,
}

impl PulsarReaderSource {
    /// A source over `partitions` (full partition names) in order; `replication` names this
    /// sidecar's cluster in a geo-replicated namespace.
    pub fn new(
        pulsar: Pulsar<TokioExecutor>,
        partitions: Vec<String>,
        range: PublishRange,
        replication: Option<&ReplicationConfig>,
    ) -> Self {
        Self {
            pulsar,
            partitions: partitions.into_iter().peekable(),
            handed: None,
            range,
            current: None,
            exhausted: false,
            read: Arc::new(AtomicU64::new(0)),
            names: StreamNaming::new(replication),
        }
    }

    /// Messages read so far (in range or not), for progress reports.
    pub fn read_counter(&self) -> Arc<AtomicU64> {
        self.read.clone()
    }

    /// Opens the next partition that holds anything; `false` when none is left. A partition
    /// stays next until it is read to its end, so a stalled reader is reopened on it.
    async fn open_next(&mut self) -> Result<bool, PulsarError> {
        while let Some(name) = self.partitions.peek().cloned() {
            let failed = |what: &str, source: pulsar::Error| PulsarError::Subscribe {
                topic: name.clone(),
                subscription: format!("backfill reader ({what})"),
                source,
            };
            let reader = self
                .pulsar
                .reader()
                .with_topic(&name)
                .with_subscription(format!(
                    "feature-connector-backfill-{}",
                    uuid::Uuid::new_v4()
                ))
                .with_subscription_type(SubType::Exclusive)
                .with_options(ConsumerOptions {
                    initial_position: InitialPosition::Earliest,
                    ..Default::default()
                })
                .into_reader();
            let mut reader = match tokio::time::timeout(STALL, reader).await {
                Ok(opened) => opened.map_err(|e| failed("open", e))?,
                Err(_) => {
                    tracing::warn!(partition = %name, "backfill reader did not open; trying again");
                    continue;
                }
            };
            let last = match tokio::time::timeout(STALL, reader.get_last_message_id()).await {
                Ok(last) => last.map_err(|e| failed("last message id", e))?,
                Err(_) => {
                    tracing::warn!(partition = %name, "backfill reader got no last message id; reopening");
                    continue;
                }
            };
            // An empty topic answers with entry -1 (as u64::MAX).
            if last.entry_id == u64::MAX || last.ledger_id == u64::MAX {
                self.finish_partition();
                continue;
            }
            self.current = Some(OpenPartition { name, reader, last });
            return Ok(true);
        }
        Ok(false)
    }
}

impl PulsarReaderSource {
    /// The partition being read is done: the next one comes.
    fn finish_partition(&mut self) {
        self.current = None;
        self.handed = None;
        self.partitions.next();
    }
}

#[async_trait]
impl Source for PulsarReaderSource {
    async fn next_batch(
        &mut self,
        max: usize,
        _linger: Duration,
        _idle: Duration,
    ) -> Result<Vec<SourceMessage>, SourceError> {
        let mut batch = Vec::with_capacity(max);
        while batch.len() < max && !self.exhausted {
            if self.current.is_none() && !self.open_next().await? {
                self.exhausted = true;
                break;
            }
            let Some(open) = self.current.as_mut() else {
                continue;
            };
            let next = match tokio::time::timeout(STALL, open.reader.next()).await {
                Ok(Some(next)) => next,
                Ok(None) => {
                    self.finish_partition();
                    continue;
                }
                Err(_) => {
                    tracing::warn!(partition = %open.name, after = ?self.handed, "backfill reader stalled; reopening it after the last message read");
                    self.current = None;
                    continue;
                }
            };
            let message = next.map_err(|source| PulsarError::Subscribe {
                topic: open.name.clone(),
                subscription: "backfill reader".into(),
                source,
            })?;
            let id = &message.message_id.id;
            let position = position_of(
                self.names.local(&message.topic),
                id,
                message.message_id.batch_size,
            );
            let at_end = (id.ledger_id, id.entry_id) >= (open.last.ledger_id, open.last.entry_id)
                && position.completes_entry();
            if self.handed.is_some_and(|handed| position.offset <= handed) {
                // Read before the reader was reopened.
                if at_end {
                    self.finish_partition();
                }
                continue;
            }
            let published = message.payload.metadata.publish_time;
            if self.range.to_ms.is_some_and(|to| published > to) {
                self.finish_partition();
                continue;
            }
            self.read.fetch_add(1, Ordering::Relaxed);
            self.handed = Some(position.offset);
            if self.range.from_ms.is_none_or(|from| published >= from) {
                batch.push(PulsarSource::message(message, &mut self.names));
            }
            if at_end {
                self.finish_partition();
            }
        }
        Ok(batch)
    }

    async fn ack(&mut self, _positions: &[MessagePosition]) -> Result<(), SourceError> {
        Ok(())
    }

    fn exhausted(&self) -> bool {
        self.exhausted
    }

    async fn close(&mut self) {
        // pulsar-rs readers close when dropped.
        self.current = None;
    }
}
