//! The Pulsar source: one durable subscription per sink lane, rebuilt when its stream fails.

mod acks;
mod admin;
pub mod auth;
mod config;
mod reader;
mod registry;
mod replication;
mod service;
mod skipped;
mod topic;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use pulsar::consumer::{ConsumerOptions, InitialPosition};
use pulsar::message::proto::command_subscribe::SubType;
use pulsar::message::proto::MessageIdData;
use pulsar::{Consumer, Pulsar, TokioExecutor};

pub use acks::{acks_for, AckTarget};
pub use admin::{parse as parse_admin_answer, AdminError, PulsarAdmin};
pub use config::{Delivery, PulsarSourceConfig, StartPosition, SubscriptionKind};
pub use reader::{PublishRange, PulsarReaderSource};
pub use registry::{SchemaRegistry, WriterSchema};
pub use replication::{ReplicationConfig, StreamNaming, SOURCE_POSITION_PROPERTY};
pub use service::{CredentialError, PulsarServiceConfig};
pub use skipped::{CursorAcks, CursorError, PulsarSkippedEntries};
pub use topic::{partitioned_topic, stream_topic, BadTopicName, TopicName};

use crate::retry::{Backoff, Cancelled};
use crate::source::{AckMode, MessagePosition, Source, SourceError, SourceMessage};
use tokio_util::sync::CancellationToken;

/// Errors of the Pulsar client, with the topic and subscription they concern.
#[derive(Debug, thiserror::Error)]
pub enum PulsarError {
    /// Connecting to the cluster failed.
    #[error("cannot connect to Pulsar at {url}: {source}")]
    Connect {
        /// The service URL.
        url: String,
        /// Why.
        source: pulsar::Error,
    },
    /// Subscribing failed (e.g. an Exclusive subscription already has a consumer).
    #[error("cannot subscribe `{subscription}` to {topic}: {source}")]
    Subscribe {
        /// Topic.
        topic: String,
        /// Subscription.
        subscription: String,
        /// Why.
        source: pulsar::Error,
    },
    /// Sending an acknowledgement failed.
    #[error("cannot acknowledge on {topic} (`{subscription}`): {source}")]
    Ack {
        /// Topic.
        topic: String,
        /// Subscription.
        subscription: String,
        /// Why.
        source: pulsar::error::ConsumerError,
    },
    /// The configured credentials or CA cannot be used.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    /// No OAuth2 access token could be had for the cluster.
    #[error("cannot log in to Pulsar at {url}: {source}")]
    OAuth2 {
        /// The service URL.
        url: String,
        /// Why.
        source: auth::OAuth2Error,
    },
}

impl From<PulsarError> for crate::source::SourceError {
    fn from(e: PulsarError) -> Self {
        crate::source::SourceError(Box::new(e))
    }
}

/// How long closing a consumer may take at shutdown.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// One close attempt, between two emptyings of the prefetch queue.
const CLOSE_ATTEMPT: Duration = Duration::from_millis(200);

/// The position of a received message (the offset is ledger, entry, batch index;
/// `batch_size` the messages of its producer batch).
pub fn position_of(
    topic: Arc<str>,
    id: &MessageIdData,
    batch_size: Option<i32>,
) -> MessagePosition {
    MessagePosition {
        topic,
        offset: (id.ledger_id, id.entry_id, id.batch_index.unwrap_or(-1)),
        entry_size: batch_size,
        origin: None,
    }
}

/// The Pulsar message id to acknowledge `position` of `topic` with (the broker acknowledges
/// by ledger and entry; the batch index says which message of a batch it was).
fn message_id(topic: &str, position: &MessagePosition) -> MessageIdData {
    let (ledger_id, entry_id, index) = position.offset;
    MessageIdData {
        ledger_id,
        entry_id,
        batch_index: (index >= 0).then_some(index),
        batch_size: position.entry_size,
        partition: TopicName::parse(topic)
            .ok()
            .and_then(|name| name.partition)
            .and_then(|p| i32::try_from(p).ok()),
        ..Default::default()
    }
}

/// Pulsar puts the schema version in message metadata as an 8-byte big-endian number.
fn decode_schema_version(bytes: &[u8]) -> Option<i64> {
    let array: [u8; 8] = bytes.try_into().ok()?;
    Some(i64::from_be_bytes(array))
}

/// The topic partitions a source consumes right now: each named topic's partitions (the
/// topic itself when not partitioned), then the namespace's topics matching the pattern.
pub async fn resolve_partitions(
    pulsar: &Pulsar<TokioExecutor>,
    config: &PulsarSourceConfig,
) -> Result<Vec<String>, pulsar::Error> {
    let mut partitions = Vec::new();
    for topic in config.named_topics() {
        let found = pulsar.lookup_partitioned_topic(topic).await?;
        partitions.extend(found.into_iter().map(|(name, _)| name));
    }
    if let (Some(Ok(regex)), Some(namespace)) = (config.pattern_regex(), config.pattern_namespace())
    {
        let mut matched: Vec<String> = pulsar
            .get_topics_of_namespace(
                namespace,
                pulsar::message::proto::command_get_topics_of_namespace::Mode::Persistent,
            )
            .await?
            .into_iter()
            .filter(|topic| regex.is_match(topic))
            .collect();
        matched.sort();
        partitions.extend(matched);
    }
    partitions.dedup();
    Ok(partitions)
}

/// A subscription of one lane to one topic.
pub struct PulsarSource {
    pulsar: Pulsar<TokioExecutor>,
    /// Topics or pattern, for logs and errors.
    topic: String,
    topics: Vec<String>,
    pattern: Option<(regex::Regex, String)>,
    pattern_refresh: Duration,
    subscription: String,
    sub_type: SubType,
    initial_position: InitialPosition,
    receiver_queue_size: u32,
    ack_mode: AckMode,
    /// Replicate the subscription's position to the namespace's other clusters (PIP-33).
    replicated: bool,
    consumer: Option<Consumer<Vec<u8>, TokioExecutor>>,
    names: StreamNaming,
    cancel: CancellationToken,
}

impl PulsarSource {
    /// Subscribes `subscription` to the pipeline's topic; fails fast on a refused subscription.
    /// `replication` names this sidecar's cluster in a geo-replicated namespace.
    pub async fn subscribe(
        pulsar: Pulsar<TokioExecutor>,
        config: &PulsarSourceConfig,
        subscription: String,
        (sub_type, ack_mode): (SubscriptionKind, AckMode),
        replication: Option<&ReplicationConfig>,
        cancel: CancellationToken,
    ) -> Result<Self, PulsarError> {
        let pattern = match (config.pattern_regex(), config.pattern_namespace()) {
            (Some(Ok(regex)), Some(namespace)) => Some((regex, namespace)),
            (Some(Err(e)), _) => {
                return Err(PulsarError::Subscribe {
                    topic: config.describe_topics(),
                    subscription,
                    source: pulsar::Error::Custom(format!("topic pattern: {e}")),
                })
            }
            _ => None,
        };
        let mut source = Self {
            pulsar,
            topic: config.describe_topics(),
            topics: config.named_topics(),
            pattern,
            pattern_refresh: config.pattern_refresh,
            subscription,
            sub_type: match sub_type {
                SubscriptionKind::Exclusive => SubType::Exclusive,
                SubscriptionKind::Shared => SubType::Shared,
                SubscriptionKind::Failover => SubType::Failover,
                SubscriptionKind::KeyShared => SubType::KeyShared,
            },
            initial_position: match config.initial_position {
                StartPosition::Earliest => InitialPosition::Earliest,
                StartPosition::Latest => InitialPosition::Latest,
            },
            receiver_queue_size: config.receiver_queue_size,
            ack_mode,
            replicated: replication.is_some_and(|r| r.replicated_subscriptions),
            consumer: None,
            names: StreamNaming::new(replication),
            cancel,
        };
        source.consumer = Some(source.build_consumer().await?);
        Ok(source)
    }

    /// Connects the client shared by all lanes of the process (credentials and CA from
    /// `service`; see [`PulsarServiceConfig::connect`]).
    pub async fn connect(
        service: &PulsarServiceConfig,
    ) -> Result<Pulsar<TokioExecutor>, PulsarError> {
        service.connect().await
    }

    async fn build_consumer(&self) -> Result<Consumer<Vec<u8>, TokioExecutor>, PulsarError> {
        let mut builder = self.pulsar.consumer().with_topics(&self.topics);
        if let Some((regex, namespace)) = &self.pattern {
            builder = builder
                .with_topic_regex(regex.clone())
                .with_lookup_namespace(namespace)
                .with_topic_refresh(self.pattern_refresh);
        }
        builder
            .with_subscription(&self.subscription)
            .with_subscription_type(self.sub_type)
            .with_consumer_name(format!("feature-connector-{}", std::process::id()))
            .with_batch_size(self.receiver_queue_size)
            .with_options(ConsumerOptions {
                initial_position: self.initial_position.clone(),
                durable: Some(true),
                replicate_subscription_state: self.replicated.then_some(true),
                ..Default::default()
            })
            .build()
            .await
            .map_err(|source| PulsarError::Subscribe {
                topic: self.topic.clone(),
                subscription: self.subscription.clone(),
                source,
            })
    }

    /// pulsar-rs consumers do not rebuild themselves once their stream fails or ends.
    /// `Err` when shutdown came first.
    async fn rebuild(&mut self) -> Result<(), Cancelled> {
        self.consumer = None;
        let mut backoff = Backoff::default();
        loop {
            match self.build_consumer().await {
                Ok(consumer) => {
                    tracing::info!(topic = %self.topic, subscription = %self.subscription, "consumer rebuilt");
                    self.consumer = Some(consumer);
                    return Ok(());
                }
                Err(e) => {
                    backoff
                        .wait(&self.cancel, "cannot rebuild consumer", &e)
                        .await?
                }
            }
        }
    }

    /// A received message as the pipeline sees it.
    pub fn message(
        message: pulsar::consumer::Message<Vec<u8>>,
        names: &mut StreamNaming,
    ) -> SourceMessage {
        // Fields are moved out, not cloned: this runs once per message.
        let pulsar::consumer::Message {
            topic,
            payload,
            message_id,
            ..
        } = message;
        let metadata = payload.metadata;
        let properties: Vec<(String, String)> = metadata
            .properties
            .into_iter()
            .map(|kv| (kv.key, kv.value))
            .collect();
        let mut position = position_of(names.local(&topic), &message_id.id, message_id.batch_size);
        position.origin = names.origin(
            metadata.replicated_from.as_deref(),
            &topic,
            &properties,
            &position,
        );
        SourceMessage {
            schema_version: metadata
                .schema_version
                .as_deref()
                .and_then(decode_schema_version),
            key: metadata.partition_key,
            publish_time_ms: metadata.publish_time,
            properties,
            position,
            payload: payload.data,
        }
    }
}

#[async_trait]
impl Source for PulsarSource {
    async fn next_batch(
        &mut self,
        max: usize,
        linger: Duration,
        idle: Duration,
    ) -> Result<Vec<SourceMessage>, SourceError> {
        let mut batch = Vec::new();
        let mut deadline: Option<tokio::time::Instant> = None;
        while batch.len() < max {
            if self.consumer.is_none() && self.rebuild().await.is_err() {
                break;
            }
            let Some(consumer) = self.consumer.as_mut() else {
                continue;
            };
            let wait_until = deadline.unwrap_or_else(|| tokio::time::Instant::now() + idle);
            match tokio::time::timeout_at(wait_until, consumer.next()).await {
                Err(_elapsed) => break,
                Ok(Some(Ok(message))) => {
                    batch.push(Self::message(message, &mut self.names));
                    deadline.get_or_insert_with(|| tokio::time::Instant::now() + linger);
                }
                Ok(Some(Err(e))) => {
                    tracing::warn!(topic = %self.topic, subscription = %self.subscription, error = %e, "consumer stream failed; rebuilding");
                    self.consumer = None;
                }
                Ok(None) => {
                    tracing::warn!(topic = %self.topic, subscription = %self.subscription, "consumer stream ended; rebuilding");
                    self.consumer = None;
                }
            }
        }
        Ok(batch)
    }

    async fn ack(&mut self, positions: &[MessagePosition]) -> Result<(), SourceError> {
        let Some(consumer) = self.consumer.as_mut() else {
            // The consumer was dropped; the broker will redeliver, and sinks are idempotent.
            return Ok(());
        };
        for target in acks_for(positions, self.ack_mode) {
            let result = match target {
                AckTarget::Individual(p) => {
                    let topic = stream_topic(&p.topic);
                    consumer.ack_with_id(topic, message_id(topic, p)).await
                }
                AckTarget::Cumulative(p) => {
                    let topic = stream_topic(&p.topic);
                    consumer
                        .cumulative_ack_with_id(topic, message_id(topic, p))
                        .await
                }
            };
            result.map_err(|source| PulsarError::Ack {
                topic: self.topic.clone(),
                subscription: self.subscription.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// The consumer engine hands prefetched messages over through a bounded queue, and
    /// handles acknowledgements and the close only between two hand-overs: once the lane stops
    /// taking messages, a full queue would block it, and with it the last acknowledgements and
    /// the close, for good. So the queue is emptied (those messages were never acknowledged;
    /// the broker delivers them again) between short close attempts.
    async fn close(&mut self) {
        let Some(mut consumer) = self.consumer.take() else {
            return;
        };
        let deadline = tokio::time::Instant::now() + CLOSE_TIMEOUT;
        let mut dropped = 0usize;
        while tokio::time::Instant::now() < deadline {
            while let Some(Some(_)) = consumer.next().now_or_never() {
                dropped += 1;
            }
            match tokio::time::timeout(CLOSE_ATTEMPT, consumer.close()).await {
                Ok(Ok(())) => {
                    tracing::debug!(dropped, "consumer closed");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "closing consumer");
                    return;
                }
                Err(_) => continue,
            }
        }
        tracing::debug!(dropped, "consumer did not close in time; dropping it");
    }
}

#[cfg(test)]
mod tests {
    use super::decode_schema_version;

    #[test]
    fn schema_version_is_big_endian() {
        assert_eq!(decode_schema_version(&[0, 0, 0, 0, 0, 0, 1, 2]), Some(258));
        assert_eq!(decode_schema_version(&[1]), None);
    }
}
