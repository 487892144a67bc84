//! The aggregations' sink: each batch's events into the entities' tiles in Redis, one batch
//! at a time and in delivery order (a stream's positions only go forward, so a batch must
//! not overtake an earlier one that is still retrying), and each stream's messages only
//! once every earlier one is applied ([`InOrder`]: what follows a gap waits for it).

use std::sync::Arc;

use async_trait::async_trait;
use redis::Script;
use tokio_util::sync::CancellationToken;

use super::cache::TileCache;
use super::events::{add_released, entity_events, take_held, EntityEvents, HeldMessage};
use super::layout::TileLayout;
use super::update::{update_script, update_tiles, UpdateOutcome};
use crate::aggregate::Aggregation;
use crate::metrics::{AggregationLabels, Metrics, PipelineLabels, UpdatePhaseLabels};
use crate::record::{RowBatch, RowLayout};
use crate::redis::{RedisClient, RedisConnection, RedisProbe, RedisServiceConfig};
use crate::retry::Backoff;
use crate::sink::{Sink, SinkBuilder, SinkContext, SinkError};
use crate::source::{AckMode, InOrder, MessagePosition, SkippedEntries};

/// Rows of queued batches taken as one update when the sink falls behind: the tiles of an
/// entity with many events in a batch are read and written once.
const MERGE_QUEUED_ROWS: usize = 8_000;

/// The builder of a pipeline's aggregations sink.
#[derive(Debug, Clone)]
pub struct TileSinkBuilder {
    /// Where Redis is.
    pub service: RedisServiceConfig,
    /// First part of the tile keys (the online section's `key_prefix`).
    pub key_prefix: String,
    /// The pipeline's aggregations.
    pub aggregations: Vec<Aggregation>,
    /// How far ahead of its publish time an event may be stamped, in ms.
    pub future_skew_ms: i64,
}

#[async_trait]
impl SinkBuilder for TileSinkBuilder {
    fn kind(&self) -> &'static str {
        "aggregations"
    }

    /// One consumer per partition, acknowledging in order: an entity's positions per stream
    /// only hold what was delivered in order.
    fn acknowledgement(&self) -> AckMode {
        AckMode::Cumulative
    }

    async fn build(&self, context: &SinkContext) -> Result<Box<dyn Sink>, SinkError> {
        let client = RedisClient::open(&self.service)
            .map_err(|e| SinkError::fatal_from("Redis client", e))?;
        context.health.add_probe(Arc::new(RedisProbe {
            client: client.clone(),
        }));
        let layout = TileLayout::new(
            &self.key_prefix,
            &context.pipeline,
            self.aggregations.clone(),
        );
        Ok(Box::new(TileSink {
            expiry_ms: layout.expiry_ms(self.future_skew_ms),
            layout,
            client,
            connection: None,
            script: update_script(),
            cache: TileCache::default(),
            rows: context.rows.clone(),
            pipeline: context.pipeline.clone(),
            metrics: context.metrics.clone(),
            cancel: context.cancel.clone(),
            order: InOrder::default(),
        }))
    }
}

/// Keeps a pipeline's aggregation tiles in Redis.
pub struct TileSink {
    layout: TileLayout,
    expiry_ms: i64,
    client: RedisClient,
    connection: Option<RedisConnection>,
    script: Script,
    /// The hashes this sink last wrote.
    cache: TileCache,
    rows: RowLayout,
    pipeline: String,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
    /// Messages waiting for a gap in their stream to be filled or done.
    order: InOrder<HeldMessage>,
}

impl TileSink {
    async fn connection(&mut self) -> Result<RedisConnection, redis::RedisError> {
        if let Some(connection) = &self.connection {
            return Ok(connection.clone());
        }
        let connection = self.client.connect().await?;
        self.connection = Some(connection.clone());
        Ok(connection)
    }

    /// The held messages whose gap is now filled or done: their rows join `entities`, their
    /// positions are returned (durable once `entities` are applied).
    async fn released(&mut self, entities: &mut Vec<EntityEvents>) -> Vec<MessagePosition> {
        if self.order.held() == 0 {
            return Vec::new();
        }
        let (positions, rows): (Vec<_>, Vec<_>) = self.order.release().await.into_iter().unzip();
        if !positions.is_empty() {
            tracing::debug!(
                messages = positions.len(),
                "held messages released: the gap before them is done"
            );
        }
        add_released(entities, rows);
        positions
    }

    /// Applies `entities`' events to their tiles, retrying while Redis fails.
    async fn apply(&mut self, entities: &[EntityEvents]) -> Result<(), SinkError> {
        if entities.is_empty() {
            return Ok(());
        }
        let mut backoff = Backoff::default();
        loop {
            let attempt = match self.connection().await {
                Ok(mut connection) => update_tiles(
                    &mut connection,
                    (&self.script, &mut self.cache),
                    &self.layout,
                    entities,
                    (chrono::Utc::now().timestamp_millis(), self.expiry_ms),
                )
                .await
                .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match attempt {
                Ok(outcome) => {
                    self.count(&outcome);
                    return Ok(());
                }
                Err(e) => {
                    self.connection = None;
                    backoff
                        .wait(
                            &self.cancel,
                            "Redis tile update failed; nothing acknowledged",
                            &e,
                        )
                        .await
                        .map_err(|_| SinkError::Cancelled("Redis was unreachable".into()))?;
                }
            }
        }
    }

    fn count(&self, outcome: &UpdateOutcome) {
        let events = &outcome.events;
        for (label, n) in [
            ("applied", events.applied),
            ("already_held", events.already_held),
            ("late", events.late),
        ] {
            if n > 0 {
                self.metrics
                    .aggregation_events
                    .get_or_create(&AggregationLabels {
                        pipeline: self.pipeline.clone(),
                        outcome: label,
                    })
                    .inc_by(n as u64);
            }
        }
        let phases = &outcome.phases;
        for (phase, took) in [
            ("apply", Some(phases.apply)),
            ("write", Some(phases.write)),
            ("redo", phases.redo),
        ] {
            if let Some(took) = took {
                self.metrics
                    .aggregation_update_seconds
                    .get_or_create(&UpdatePhaseLabels {
                        pipeline: self.pipeline.clone(),
                        phase,
                    })
                    .observe(took.as_secs_f64());
            }
        }
        if outcome.found_stored > 0 {
            tracing::debug!(
                entities = outcome.found_stored,
                "entities without a copy in the sink were stored already: applied again from the store"
            );
        }
        if outcome.conflicts > 0 {
            self.metrics
                .aggregation_update_conflicts
                .get_or_create(&PipelineLabels {
                    pipeline: self.pipeline.clone(),
                })
                .inc_by(outcome.conflicts as u64);
        }
    }
}

#[async_trait]
impl Sink for TileSink {
    fn kind(&self) -> &'static str {
        "aggregations"
    }

    fn reports_freshness(&self) -> bool {
        true
    }

    fn merge_queued_rows(&self) -> usize {
        MERGE_QUEUED_ROWS
    }

    fn set_skipped_entries(&mut self, probe: Arc<dyn SkippedEntries>) {
        self.order.set_probe(probe);
    }

    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        let mut entities = entity_events(&self.layout, &self.rows, &batch)
            .map_err(|e| SinkError::fatal_from("reading the aggregated columns", e))?;
        let ready = self
            .order
            .admit(&batch.positions, |ready| take_held(&mut entities, ready));
        let held = self.order.take_gap_holds();
        if held > 0 {
            self.metrics
                .aggregation_held_messages
                .get_or_create(&PipelineLabels {
                    pipeline: self.pipeline.clone(),
                })
                .inc_by(held);
        }
        let mut durable = self.released(&mut entities).await;
        self.apply(&entities).await?;
        durable.extend(
            batch
                .positions
                .into_iter()
                .zip(ready)
                .filter_map(|(position, ready)| ready.then_some(position)),
        );
        Ok(durable)
    }

    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        let mut entities = Vec::new();
        let durable = self.released(&mut entities).await;
        self.apply(&entities).await?;
        Ok(durable)
    }

    async fn flush(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        Ok(Vec::new())
    }
}
