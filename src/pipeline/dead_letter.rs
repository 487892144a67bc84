//! The dead-letter topic: messages that cannot be decoded go there with the reason, and are
//! acknowledged only after the broker stored them there. A durable subscription on it keeps
//! them: without one (and without a retention policy) the broker deletes a topic's closed
//! ledgers, so dead letters published before a broker restart or ledger rollover would vanish.

use pulsar::producer::{Producer, ProducerOptions};
use pulsar::{Pulsar, TokioExecutor};
use tokio_util::sync::CancellationToken;

use super::dead_letter_log::{DeadLetterLog, Logged, DEAD_LETTER_LOG_INTERVAL};
use crate::pulsar::{stream_topic, AdminError, PulsarAdmin, PulsarSourceConfig};
use crate::retry::Backoff;
use crate::schema::DecodeFailure;
use crate::sink::SinkError;
use crate::source::SourceMessage;

/// Why one attempt to publish dead letters failed.
#[derive(Debug, thiserror::Error)]
enum PublishError {
    #[error("keeping subscription `{subscription}` could not be created: {source}")]
    Subscription {
        subscription: String,
        #[source]
        source: AdminError,
    },
    #[error(transparent)]
    Pulsar(#[from] pulsar::Error),
}

/// Where dead letters go: the topic and the subscription that keeps them.
pub struct DeadLetterTarget {
    /// The dead-letter topic.
    pub topic: String,
    /// The durable subscription created on it (at its earliest message) before the first
    /// publish.
    pub subscription: String,
}

impl DeadLetterTarget {
    /// The dead-letter topic and keeping subscription `source` configures (or defaults).
    pub fn of(source: &PulsarSourceConfig) -> Self {
        Self {
            topic: source.dead_letter_topic(),
            subscription: source.dead_letter_subscription().to_string(),
        }
    }
}

/// Publishes undecodable messages, unchanged, with properties that say why.
pub struct DeadLetter {
    pulsar: Pulsar<TokioExecutor>,
    admin: PulsarAdmin,
    topic: String,
    subscription: String,
    subscription_ready: bool,
    pipeline: String,
    producer: Option<Producer<TokioExecutor>>,
    cancel: CancellationToken,
    log: DeadLetterLog,
}

impl DeadLetter {
    /// A dead-letter publisher for `pipeline` writing to `target`.
    pub fn new(
        pulsar: Pulsar<TokioExecutor>,
        admin: PulsarAdmin,
        target: DeadLetterTarget,
        pipeline: &str,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            pulsar,
            admin,
            topic: target.topic,
            subscription: target.subscription,
            subscription_ready: false,
            pipeline: pipeline.to_string(),
            producer: None,
            cancel,
            log: DeadLetterLog::new(pipeline, DEAD_LETTER_LOG_INTERVAL),
        }
    }

    /// Writes the dead-letter log lines whose interval has ended.
    pub fn log_due(&mut self) {
        self.log.flush_due(std::time::Instant::now());
    }

    /// Writes every dead-letter count not logged yet (the lane stops).
    pub fn log_all(&mut self) {
        self.log.flush_all(std::time::Instant::now());
    }

    /// Publishes each failed message and waits for the broker's receipts; retries with
    /// backoff until stored or cancelled.
    pub async fn publish(
        &mut self,
        messages: &[SourceMessage],
        failures: &[DecodeFailure],
    ) -> Result<(), SinkError> {
        if failures.is_empty() {
            return Ok(());
        }
        let mut backoff = Backoff::default();
        loop {
            match self.publish_once(messages, failures).await {
                Ok(()) => {
                    self.logged(messages, failures);
                    return Ok(());
                }
                Err(e) => {
                    self.producer = None;
                    let what = format!("dead-letter publish to {} failed", self.topic);
                    backoff.wait(&self.cancel, &what, &e).await.map_err(|_| {
                        SinkError::Cancelled("the dead-letter topic was unreachable".into())
                    })?;
                }
            }
        }
    }

    async fn publish_once(
        &mut self,
        messages: &[SourceMessage],
        failures: &[DecodeFailure],
    ) -> Result<(), PublishError> {
        if !self.subscription_ready {
            let created = self
                .admin
                .ensure_subscription(&self.topic, &self.subscription)
                .await
                .map_err(|source| PublishError::Subscription {
                    subscription: self.subscription.clone(),
                    source,
                })?;
            if created {
                tracing::info!(topic = %self.topic, subscription = %self.subscription,
                    "created the subscription that keeps dead letters");
            }
            self.subscription_ready = true;
        }
        if self.producer.is_none() {
            let producer = self
                .pulsar
                .producer()
                .with_topic(&self.topic)
                .with_name(format!(
                    "feature-connector-dlq-{}-{}",
                    self.pipeline,
                    uuid::Uuid::new_v4()
                ))
                .with_options(ProducerOptions {
                    block_queue_if_full: true,
                    ..Default::default()
                })
                .build()
                .await?;
            self.producer = Some(producer);
        }
        let Some(producer) = self.producer.as_mut() else {
            return Ok(());
        };
        let mut receipts = Vec::with_capacity(failures.len());
        for failure in failures {
            let Some(message) = messages.get(failure.index) else {
                continue;
            };
            let mut builder = producer
                .create_message()
                .with_content(message.payload.clone());
            for (key, value) in &message.properties {
                builder = builder.with_property(key.clone(), value.clone());
            }
            builder = builder
                .with_property("reason", failure.reason.as_str())
                .with_property("reason_detail", failure.detail.clone())
                .with_property("pipeline", self.pipeline.clone())
                .with_property(
                    "original_topic",
                    stream_topic(&message.position.topic).to_string(),
                )
                .with_property("original_message_id", message.position.display_id())
                .with_property(
                    "schema_version",
                    message
                        .schema_version
                        .map_or_else(|| "none".to_string(), |v| v.to_string()),
                );
            if let Some(key) = &message.key {
                builder = builder.with_key(key.clone());
            }
            receipts.push(builder.send_non_blocking().await?);
        }
        for receipt in receipts {
            receipt.await?;
        }
        tracing::debug!(topic = %self.topic, count = failures.len(), "messages sent to the dead-letter topic");
        Ok(())
    }

    /// Hands the stored dead letters to the log (a line per reason and version and interval).
    fn logged(&mut self, messages: &[SourceMessage], failures: &[DecodeFailure]) {
        let now = std::time::Instant::now();
        for failure in failures {
            let Some(message) = messages.get(failure.index) else {
                continue;
            };
            self.log.record(
                now,
                Logged {
                    reason: failure.reason,
                    schema_version: message.schema_version,
                    message_id: message.position.display_id(),
                    detail: &failure.detail,
                },
            );
        }
    }
}
