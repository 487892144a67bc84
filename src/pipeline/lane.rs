//! A lane: one subscription feeding one sink, acknowledging what the sink made durable.

use std::sync::Arc;

use arrow::array::Array;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::dead_letter::DeadLetter;
use crate::health::Health;
use crate::metrics::{DeadLetterLabels, LaneLabels, Metrics};
use crate::record::{event_time_millis, RowBatch};
use crate::retry::Backoff;
use crate::schema::TopicDecoders;
use crate::sink::{Sink, SinkError};
use crate::source::{MessagePosition, Source, SourceError};

/// A lane stopped for a reason other than shutdown.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The sink cannot go on.
    #[error("pipeline `{pipeline}` {sink} sink: {source}")]
    Sink {
        /// Pipeline name.
        pipeline: String,
        /// Sink kind.
        sink: &'static str,
        /// Why.
        source: SinkError,
    },
    /// The source cannot go on.
    #[error("pipeline `{pipeline}` {sink} lane source: {source}")]
    Source {
        /// Pipeline name.
        pipeline: String,
        /// Sink kind.
        sink: &'static str,
        /// Why.
        source: SourceError,
    },
}

/// How long a lane waits for messages before giving its sink a time-based tick.
const IDLE_TICK: Duration = Duration::from_millis(200);

/// Source → decoder → (dead letters) → sink → acknowledgements, one batch at a time; a slow
/// or down sink therefore pauses consumption of its own subscription only.
pub struct Lane {
    /// Pipeline name.
    pub pipeline: String,
    /// Where messages come from.
    pub source: Box<dyn Source>,
    /// Payload decoders, one per topic.
    pub decoder: TopicDecoders,
    /// Where rows go.
    pub sink: Box<dyn Sink>,
    /// Publisher for undecodable messages; `None` when another lane of the pipeline owns it.
    pub dead_letter: Option<DeadLetter>,
    /// Most messages per batch.
    pub max_batch: usize,
    /// Longest wait to fill a batch.
    pub linger: Duration,
    /// Shutdown signal.
    pub cancel: CancellationToken,
    /// Where counts go.
    pub metrics: Arc<Metrics>,
    /// Where the lane reports that it is subscribed (for `/readyz`).
    pub health: Arc<Health>,
}

impl Lane {
    /// Runs until shutdown, then flushes the sink and acknowledges what it committed.
    pub async fn run(mut self) -> Result<(), LaneError> {
        let span = tracing::info_span!("lane", pipeline = %self.pipeline, sink = self.sink.kind());
        async move {
            let result = match self.sink.start().await {
                Ok(()) => {
                    tracing::info!("lane started");
                    self.health.lane_started();
                    let result = self.consume().await;
                    self.health.lane_stopped();
                    result
                }
                Err(SinkError::Cancelled(_)) => Ok(()),
                Err(source) => Err(self.sink_error(source)),
            };
            let flushed = match self.sink.flush().await {
                Ok(durable) => self.ack(&durable).await,
                Err(SinkError::Cancelled(why)) => {
                    tracing::warn!(%why, "shutdown before the last rows were durable; they will be redelivered");
                    Ok(())
                }
                Err(source) => Err(self.sink_error(source)),
            };
            self.source.close().await;
            tracing::info!("lane stopped");
            result.and(flushed)
        }
        .instrument(span)
        .await
    }

    async fn consume(&mut self) -> Result<(), LaneError> {
        loop {
            let messages = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Ok(()),
                batch = self.source.next_batch(self.max_batch, self.linger, IDLE_TICK) => {
                    batch.map_err(|source| self.source_error(source))?
                }
            };
            if !messages.is_empty() {
                if tracing::enabled!(tracing::Level::TRACE) {
                    for message in &messages {
                        tracing::trace!(key = message.key.as_deref().unwrap_or(""), message_id = %message.position.display_id(), "message received");
                    }
                }
                let labels = self.labels();
                let count = messages.len() as u64;
                self.metrics
                    .messages_received
                    .get_or_create(&labels)
                    .inc_by(count);
                self.metrics
                    .batch_messages
                    .get_or_create(&labels)
                    .observe(count as f64);
                self.metrics
                    .messages_in_flight
                    .get_or_create(&labels)
                    .inc_by(i64::try_from(count).unwrap_or(i64::MAX));
                let batch_span = tracing::debug_span!("batch", messages = messages.len());
                let Some(durable) = self.process(messages).instrument(batch_span).await? else {
                    return Ok(());
                };
                self.ack(&durable).await?;
            }
            match self.sink.tick().await {
                Ok(durable) => self.ack(&durable).await?,
                Err(SinkError::Cancelled(_)) => return Ok(()),
                Err(source) => return Err(self.sink_error(source)),
            }
        }
    }

    /// Decodes, dead-letters and writes one batch; `None` when shutdown interrupted it.
    async fn process(
        &mut self,
        messages: Vec<crate::source::SourceMessage>,
    ) -> Result<Option<Vec<MessagePosition>>, LaneError> {
        let mut backoff = Backoff::default();
        let decoded = loop {
            match self.decoder.decode(&messages).await {
                Ok(decoded) => break decoded,
                Err(e) => {
                    if backoff
                        .wait(&self.cancel, "cannot decode batch yet", &e)
                        .await
                        .is_err()
                    {
                        return Ok(None);
                    }
                }
            }
        };
        if !decoded.failures.is_empty() {
            for failure in &decoded.failures {
                if let Some(message) = messages.get(failure.index) {
                    tracing::warn!(message_id = %message.position.display_id(), reason = failure.reason, detail = %failure.detail, "message cannot be decoded");
                }
            }
            if let Some(dead_letter) = self.dead_letter.as_mut() {
                match dead_letter.publish(&messages, &decoded.failures).await {
                    Ok(()) => {
                        for failure in &decoded.failures {
                            self.metrics
                                .dead_lettered
                                .get_or_create(&DeadLetterLabels {
                                    pipeline: self.pipeline.clone(),
                                    reason: failure.reason.to_string(),
                                })
                                .inc();
                        }
                    }
                    Err(SinkError::Cancelled(_)) => return Ok(None),
                    Err(source) => return Err(self.sink_error(source)),
                }
            }
        }
        let rows = decoded.rows.num_rows() as u64;
        self.metrics
            .messages_decoded
            .get_or_create(&self.labels())
            .inc_by((messages.len() - decoded.failures.len()) as u64);
        // Freshness is measured where values become readable: the online store only.
        let online = self.sink.kind() == "online";
        let event_times: Vec<i64> = decoded
            .rows
            .column_by_name(self.decoder.event_time())
            .filter(|_| online)
            .map(|column| {
                (0..column.len())
                    .filter_map(|row| event_time_millis(column, row))
                    .collect()
            })
            .unwrap_or_default();
        let batch = RowBatch {
            rows: decoded.rows,
            publish_times_ms: messages.iter().map(|m| m.publish_time_ms).collect(),
            positions: messages.into_iter().map(|m| m.position).collect(),
            row_positions: decoded.row_messages,
        };
        let publish_times = if online {
            batch.publish_times_ms.clone()
        } else {
            Vec::new()
        };
        let started = Instant::now();
        let written = self.sink.write(batch).await;
        self.metrics
            .sink_write_seconds
            .get_or_create(&self.labels())
            .observe(started.elapsed().as_secs_f64());
        match written {
            Ok(durable) => {
                if online {
                    self.observe_freshness(&publish_times, &event_times);
                }
                self.metrics
                    .rows_written
                    .get_or_create(&self.labels())
                    .inc_by(rows);
                Ok(Some(durable))
            }
            Err(SinkError::Cancelled(_)) => Ok(None),
            Err(source) => Err(self.sink_error(source)),
        }
    }

    async fn ack(&mut self, durable: &[MessagePosition]) -> Result<(), LaneError> {
        if durable.is_empty() {
            return Ok(());
        }
        self.source
            .ack(durable)
            .await
            .map_err(|source| self.source_error(source))?;
        let labels = self.labels();
        self.metrics
            .messages_acked
            .get_or_create(&labels)
            .inc_by(durable.len() as u64);
        self.metrics
            .messages_in_flight
            .get_or_create(&labels)
            .dec_by(i64::try_from(durable.len()).unwrap_or(i64::MAX));
        Ok(())
    }

    /// Values are readable in Redis once its write returns: record how old they were then.
    fn observe_freshness(&self, publish_times: &[u64], event_times: &[i64]) {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let labels = self.labels();
        let by_publish = self
            .metrics
            .freshness_publish_time_seconds
            .get_or_create(&labels);
        for &published in publish_times {
            let age = now_ms - i64::try_from(published).unwrap_or(i64::MAX);
            by_publish.observe(age.max(0) as f64 / 1000.0);
        }
        let by_event = self
            .metrics
            .freshness_event_time_seconds
            .get_or_create(&labels);
        for &event in event_times {
            by_event.observe((now_ms - event).max(0) as f64 / 1000.0);
        }
    }

    fn labels(&self) -> LaneLabels {
        LaneLabels {
            pipeline: self.pipeline.clone(),
            sink: self.sink.kind(),
        }
    }

    fn sink_error(&self, source: SinkError) -> LaneError {
        LaneError::Sink {
            pipeline: self.pipeline.clone(),
            sink: self.sink.kind(),
            source,
        }
    }

    fn source_error(&self, source: SourceError) -> LaneError {
        LaneError::Source {
            pipeline: self.pipeline.clone(),
            sink: self.sink.kind(),
            source,
        }
    }
}
