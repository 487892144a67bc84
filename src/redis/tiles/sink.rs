//! The aggregations' sink: each batch's events into the entities' tiles in Redis, one batch
//! at a time and in delivery order (a stream's positions only go forward, so a batch must
//! not overtake an earlier one that is still retrying).

use std::sync::Arc;

use async_trait::async_trait;
use redis::Script;
use tokio_util::sync::CancellationToken;

use super::events::entity_events;
use super::layout::TileLayout;
use super::update::{update_script, update_tiles, UpdateOutcome};
use crate::aggregate::Aggregation;
use crate::metrics::{AggregationLabels, Metrics, PipelineLabels};
use crate::record::{RowBatch, RowLayout};
use crate::redis::{RedisClient, RedisConnection, RedisProbe, RedisServiceConfig};
use crate::retry::Backoff;
use crate::sink::{Sink, SinkBuilder, SinkContext, SinkError};
use crate::source::{AckMode, MessagePosition};

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
            rows: context.rows.clone(),
            pipeline: context.pipeline.clone(),
            metrics: context.metrics.clone(),
            cancel: context.cancel.clone(),
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
    rows: RowLayout,
    pipeline: String,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
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

    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        let entities = entity_events(&self.layout, &self.rows, &batch)
            .map_err(|e| SinkError::fatal_from("reading the aggregated columns", e))?;
        let mut backoff = Backoff::default();
        loop {
            let attempt = match self.connection().await {
                Ok(mut connection) => update_tiles(
                    &mut connection,
                    &self.script,
                    &self.layout,
                    &entities,
                    (chrono::Utc::now().timestamp_millis(), self.expiry_ms),
                )
                .await
                .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match attempt {
                Ok(outcome) => {
                    self.count(&outcome);
                    return Ok(batch.positions);
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

    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        Ok(Vec::new())
    }

    async fn flush(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        Ok(Vec::new())
    }
}
