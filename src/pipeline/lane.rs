//! A lane: one subscription feeding one or more sinks, acknowledging what all of them made
//! durable.

use std::sync::Arc;

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::ack_gate::AckGate;
use super::dead_letter::DeadLetter;
use super::sink_task::{self, SinkHandle, SinkReport, SinkTaskContext};
use crate::health::{Health, LaneProgress};
use crate::metrics::{DeadLetterLabels, LaneLabels, Metrics};
use crate::record::{max_event_time_millis, RowBatch};
use crate::retry::Backoff;
use crate::schema::{DecodeFailure, TopicDecoders};
use crate::sink::{Sink, SinkError};
use crate::source::{MessagePosition, Source, SourceError, SourceMessage};

/// A lane stopped for a reason other than shutdown.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// A sink cannot go on.
    #[error("pipeline `{pipeline}` {sink} sink: {source}")]
    Sink {
        /// Pipeline name.
        pipeline: String,
        /// Sink kind.
        sink: &'static str,
        /// Why.
        #[source]
        source: SinkError,
    },
    /// The source cannot go on.
    #[error("pipeline `{pipeline}` {lane} lane source: {source}")]
    Source {
        /// Pipeline name.
        pipeline: String,
        /// The lane's sinks.
        lane: String,
        /// Why.
        #[source]
        source: SourceError,
    },
}

/// How long a lane waits for messages before giving its sinks a time-based tick.
const IDLE_TICK: Duration = Duration::from_millis(200);

/// How much longer than its sinks' longest hold a lane may wait for an acknowledgement
/// before it counts as stalled (`/readyz` detail, `ack_wait_limit_seconds`): room for a
/// commit, a retry and a slow broker.
const STALL_SLACK: Duration = Duration::from_secs(30);

/// Source → decoder → (dead letters) → sinks → acknowledgements, one batch at a time. A
/// message is acknowledged once every sink of the lane has it durable; a slow or down sink
/// therefore pauses consumption of this lane's subscription only.
pub struct Lane {
    /// Pipeline name.
    pub pipeline: String,
    /// Where messages come from.
    pub source: Box<dyn Source>,
    /// Payload decoders, one per topic.
    pub decoder: TopicDecoders,
    /// Where rows go; each gets every batch.
    pub sinks: Vec<Box<dyn Sink>>,
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

/// What a lane does while it runs: the lane's parts, its acknowledgement gate and, once
/// started, its sinks' tasks.
struct Running {
    lane: Lane,
    name: String,
    gate: AckGate,
    /// The sinks' kinds, by index (the sinks themselves are in their tasks while running).
    kinds: Vec<&'static str>,
    handles: Vec<SinkHandle>,
    reports: Option<mpsc::UnboundedReceiver<SinkReport>>,
    /// Messages waiting and the last acknowledgement, for stall detection.
    progress: Arc<LaneProgress>,
}

impl Lane {
    /// The lane's name in logs and metrics: its sinks' kinds joined by `+`.
    pub fn name(&self) -> String {
        self.sinks
            .iter()
            .map(|sink| sink.kind())
            .collect::<Vec<_>>()
            .join("+")
    }

    /// Runs until shutdown, then flushes the sinks and acknowledges what they committed.
    pub async fn run(self) -> Result<(), LaneError> {
        self.run_to_end().await.0
    }

    /// Like [`Lane::run`] (also ending when a finite source is exhausted), and hands back
    /// the sinks so that the caller can ask what they still hold.
    pub async fn run_to_end(self) -> (Result<(), LaneError>, Vec<Box<dyn Sink>>) {
        let name = self.name();
        let gate = AckGate::new(self.sinks.len());
        let kinds = self.sinks.iter().map(|sink| sink.kind()).collect();
        let longest_hold = self
            .sinks
            .iter()
            .map(|sink| sink.longest_hold())
            .max()
            .unwrap_or_default();
        let progress = self.health.track_lane(
            &self.pipeline,
            &name,
            longest_hold + STALL_SLACK,
            &self.metrics,
        );
        let span = tracing::info_span!("lane", pipeline = %self.pipeline, sink = %name);
        let mut running = Running {
            lane: self,
            name,
            gate,
            kinds,
            handles: Vec::new(),
            reports: None,
            progress,
        };
        let outcome = running.run().instrument(span).await;
        (outcome, running.lane.sinks)
    }
}

impl Running {
    async fn run(&mut self) -> Result<(), LaneError> {
        let result = match self.start_sinks().await {
            Ok(true) => {
                self.spawn_sinks();
                tracing::info!("lane started");
                self.lane.health.lane_started();
                let result = self.consume().await;
                self.lane.health.lane_stopped();
                self.progress.stopped();
                result
            }
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        let flushed = self.flush().await;
        if let Some(dead_letter) = self.lane.dead_letter.as_mut() {
            dead_letter.log_all();
        }
        self.lane.source.close().await;
        tracing::info!("lane stopped");
        result.and(flushed)
    }

    /// `Ok(false)` when shutdown came while a sink was still getting ready.
    async fn start_sinks(&mut self) -> Result<bool, LaneError> {
        for index in 0..self.lane.sinks.len() {
            match self.lane.sinks[index].start().await {
                Ok(()) => {}
                Err(SinkError::Cancelled(_)) => return Ok(false),
                Err(source) => return Err(self.sink_error(index, source)),
            }
        }
        Ok(true)
    }

    /// Hands each sink to a task of its own (see [`super::sink_task`]).
    fn spawn_sinks(&mut self) {
        let (reports, receiver) = mpsc::unbounded_channel();
        for (index, sink) in std::mem::take(&mut self.lane.sinks).into_iter().enumerate() {
            let context = SinkTaskContext {
                index,
                labels: self.sink_labels(index),
                metrics: self.lane.metrics.clone(),
                event_time: self.lane.decoder.event_time().to_string(),
                reports: reports.clone(),
            };
            self.handles.push(sink_task::spawn(sink, context));
        }
        self.reports = Some(receiver);
    }

    /// Ends the sinks' tasks (each flushes), acknowledges what they made durable and takes
    /// the sinks back.
    async fn flush(&mut self) -> Result<(), LaneError> {
        let (senders, tasks): (Vec<_>, Vec<_>) = std::mem::take(&mut self.handles)
            .into_iter()
            .map(|handle| (handle.batches, handle.task))
            .unzip();
        drop(senders);
        let mut first_error = None;
        if let Some(mut reports) = self.reports.take() {
            while let Some(report) = reports.recv().await {
                if let Err(e) = self.on_report(report).await {
                    first_error.get_or_insert(e);
                }
            }
        }
        for task in tasks {
            match task.await {
                Ok(sink) => self.lane.sinks.push(sink),
                Err(e) => tracing::error!(error = %e, "sink task panicked"),
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Acts on one sink report: acknowledges, or turns a failure into the lane's error.
    /// `Ok(false)` when the sink stopped on shutdown.
    async fn on_report(&mut self, report: SinkReport) -> Result<bool, LaneError> {
        match report {
            SinkReport::Durable(durable) => {
                self.ack(durable).await?;
                Ok(true)
            }
            SinkReport::Ended => Ok(true),
            SinkReport::Cancelled(why) => {
                tracing::warn!(%why, "shutdown before the last rows were durable; they will be redelivered");
                Ok(false)
            }
            SinkReport::Failed(index, source) => Err(self.sink_error(index, source)),
        }
    }

    /// Acts on every report waiting; `Ok(false)` when a sink stopped on shutdown.
    async fn drain_reports(&mut self) -> Result<bool, LaneError> {
        let mut going = true;
        while let Some(report) = self.reports.as_mut().and_then(|r| r.try_recv().ok()) {
            going &= self.on_report(report).await?;
        }
        Ok(going)
    }

    async fn consume(&mut self) -> Result<(), LaneError> {
        loop {
            let lane = &mut self.lane;
            let messages = tokio::select! {
                biased;
                () = lane.cancel.cancelled() => return Ok(()),
                batch = lane.source.next_batch(lane.max_batch, lane.linger, IDLE_TICK) => batch,
            };
            let messages = messages.map_err(|source| self.source_error(source))?;
            if messages.is_empty() && self.lane.source.exhausted() {
                return Ok(());
            }
            if !messages.is_empty() {
                if tracing::enabled!(tracing::Level::TRACE) {
                    for message in &messages {
                        tracing::trace!(key = message.key.as_deref().unwrap_or(""), message_id = %message.position.display_id(), "message received");
                    }
                }
                let labels = self.labels();
                let metrics = &self.lane.metrics;
                let count = messages.len() as u64;
                metrics
                    .messages_received
                    .get_or_create(&labels)
                    .inc_by(count);
                metrics
                    .batch_messages
                    .get_or_create(&labels)
                    .observe(count as f64);
                self.progress.received(count);
                let batch_span = tracing::debug_span!("batch", messages = messages.len());
                if !self.process(messages).instrument(batch_span).await? {
                    return Ok(());
                }
            }
            if let Some(dead_letter) = self.lane.dead_letter.as_mut() {
                dead_letter.log_due();
            }
            if !self.drain_reports().await? {
                return Ok(());
            }
        }
    }

    /// Decodes, dead-letters, writes one batch to every sink and acknowledges what all of
    /// them have durable; `false` when shutdown interrupted it.
    async fn process(&mut self, messages: Vec<SourceMessage>) -> Result<bool, LaneError> {
        let mut backoff = Backoff::default();
        let decoded = loop {
            match self.lane.decoder.decode(&messages).await {
                Ok(decoded) => break decoded,
                Err(e) => {
                    if backoff
                        .wait(&self.lane.cancel, "cannot decode batch yet", &e)
                        .await
                        .is_err()
                    {
                        return Ok(false);
                    }
                }
            }
        };
        if !decoded.failures.is_empty() && !self.dead_letter(&messages, &decoded.failures).await? {
            return Ok(false);
        }
        self.lane
            .metrics
            .messages_decoded
            .get_or_create(&self.labels())
            .inc_by((messages.len() - decoded.failures.len()) as u64);
        let event_time = decoded.rows.column_by_name(self.lane.decoder.event_time());
        if let Some(newest) = event_time.and_then(max_event_time_millis) {
            self.progress.decoded_events_up_to(newest);
        }
        let batch = RowBatch {
            rows: decoded.rows,
            publish_times_ms: messages.iter().map(|m| m.publish_time_ms).collect(),
            positions: messages.into_iter().map(|m| m.position).collect(),
            row_positions: decoded.row_messages,
        };
        self.gate.received(&batch.positions);
        let mut copies = vec![batch.clone(); self.handles.len().saturating_sub(1)];
        copies.push(batch);
        let mut ended = None;
        for (index, (handle, copy)) in self.handles.iter().zip(copies).enumerate() {
            let started = Instant::now();
            let sent = tokio::select! {
                biased;
                () = self.lane.cancel.cancelled() => return Ok(false),
                sent = handle.batches.send(copy) => sent,
            };
            self.lane
                .metrics
                .sink_queue_wait_seconds
                .get_or_create(&self.sink_labels(index))
                .inc_by(started.elapsed().as_secs_f64());
            if sent.is_err() {
                ended = Some(index);
                break;
            }
        }
        if let Some(index) = ended {
            // A sink task reports why before it ends, so that report is waiting already.
            if !self.drain_reports().await? {
                return Ok(false);
            }
            return Err(self.sink_error(
                index,
                SinkError::fatal("its task ended without a report (it panicked)"),
            ));
        }
        self.drain_reports().await
    }

    /// Publishes the undecodable messages to the dead-letter topic (when this lane owns it);
    /// `false` when shutdown interrupted it.
    async fn dead_letter(
        &mut self,
        messages: &[SourceMessage],
        failures: &[DecodeFailure],
    ) -> Result<bool, LaneError> {
        for failure in failures {
            if let Some(message) = messages.get(failure.index) {
                // The dead-letter log (one line per reason, version and interval) says it
                // at WARN; per message only at debug.
                tracing::debug!(message_id = %message.position.display_id(), reason = failure.reason.as_str(), detail = %failure.detail, "message cannot be decoded");
            }
        }
        let Some(dead_letter) = self.lane.dead_letter.as_mut() else {
            return Ok(true);
        };
        match dead_letter.publish(messages, failures).await {
            Ok(()) => {
                for failure in failures {
                    self.lane
                        .metrics
                        .dead_lettered
                        .get_or_create(&DeadLetterLabels {
                            pipeline: self.lane.pipeline.clone(),
                            reason: failure.reason.to_string(),
                        })
                        .inc();
                }
                Ok(true)
            }
            Err(SinkError::Cancelled(_)) => Ok(false),
            Err(source) => Err(LaneError::Sink {
                pipeline: self.lane.pipeline.clone(),
                sink: "dead-letter",
                source,
            }),
        }
    }

    /// A sink made `durable` durable: acknowledges what every sink now has.
    async fn ack(&mut self, durable: Vec<MessagePosition>) -> Result<(), LaneError> {
        let released = self.gate.durable(durable);
        if released.is_empty() {
            return Ok(());
        }
        self.lane
            .source
            .ack(&released)
            .await
            .map_err(|source| self.source_error(source))?;
        let labels = self.labels();
        let metrics = &self.lane.metrics;
        metrics
            .messages_acked
            .get_or_create(&labels)
            .inc_by(released.len() as u64);
        self.progress.acknowledged(released.len() as u64);
        Ok(())
    }

    fn labels(&self) -> LaneLabels {
        LaneLabels {
            pipeline: self.lane.pipeline.clone(),
            sink: self.name.clone(),
        }
    }

    fn sink_labels(&self, index: usize) -> LaneLabels {
        LaneLabels {
            pipeline: self.lane.pipeline.clone(),
            sink: self.kinds[index].to_string(),
        }
    }

    fn sink_error(&self, index: usize, source: SinkError) -> LaneError {
        LaneError::Sink {
            pipeline: self.lane.pipeline.clone(),
            sink: self.kinds[index],
            source,
        }
    }

    fn source_error(&self, source: SourceError) -> LaneError {
        LaneError::Source {
            pipeline: self.lane.pipeline.clone(),
            lane: self.name.clone(),
            source,
        }
    }
}
