//! Turns a pipeline's `offline:` section into a running Delta sink.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    DeltaSink, DeltaSinkConfig, ObjectStoreProbe, ObjectStoreServiceConfig, Table, TableError,
    TableRoot, TableSpec,
};
use crate::sink::{Sink, SinkBuilder, SinkContext, SinkError};
use crate::source::AckMode;

/// The offline sink of one pipeline, with the service's object-store defaults.
#[derive(Debug, Clone)]
pub struct DeltaSinkBuilder {
    /// Default URL and store options.
    pub service: ObjectStoreServiceConfig,
    /// The pipeline's `offline:` section.
    pub config: DeltaSinkConfig,
    /// How long messages after a gap in a partition wait before the sink commits past it;
    /// `None` for the live default. A backfill never commits past a gap.
    pub gap_grace: Option<Duration>,
}

impl DeltaSinkBuilder {
    /// Where the pipeline's table is and what it holds.
    pub fn table_spec(&self, context: &SinkContext) -> Result<TableSpec, SinkError> {
        let url = self
            .config
            .url
            .as_ref()
            .map_or(self.service.default_url.as_str(), |u| u.value.as_str());
        let store = TableRoot::open(url, &context.root, &self.service.options)
            .map_err(|e| SinkError::fatal_from("offline store", e))?
            .counted(&context.metrics, &context.pipeline);
        TableSpec::new(
            &store,
            &context.pipeline,
            &context.output_schema,
            &context.rows.event_time,
            &self.config,
        )
        .map_err(|e| SinkError::fatal_from("offline table", e))
    }
}

#[async_trait]
impl SinkBuilder for DeltaSinkBuilder {
    fn kind(&self) -> &'static str {
        "offline"
    }

    /// The table stores, per topic partition, the newest position it committed.
    fn acknowledgement(&self) -> AckMode {
        AckMode::Cumulative
    }

    /// Opens (or creates, or evolves) the table before any lane runs, so that a table that
    /// cannot take the pipeline schema stops the process with nothing written. A store that
    /// does not answer is not fatal: the sink opens the table itself, retrying.
    async fn build(&self, context: &SinkContext) -> Result<Box<dyn Sink>, SinkError> {
        let spec = self.table_spec(context)?;
        let table = open_at_start(&spec).await?;
        context.health.add_probe(Arc::new(ObjectStoreProbe {
            pipeline: context.pipeline.clone(),
            store: spec.location.store.clone(),
        }));
        let mut sink = DeltaSink::new(spec, self.config.clone(), table, context.cancel.clone());
        sink.set_schema_fingerprint(context.schema_fingerprint.clone());
        sink.set_metrics(context.metrics.clone());
        sink.set_offline_origins(context.offline_origins);
        if let Some(grace) = self.gap_grace {
            sink.set_gap_grace(grace);
        }
        Ok(Box::new(sink))
    }
}

/// How long start-up retries a table it cannot read before leaving it to the lane: another
/// writer (a replica, another region's sidecar) may be creating it at this very moment.
const OPEN_RETRY_FOR: Duration = Duration::from_secs(3);
const OPEN_RETRY_DELAY: Duration = Duration::from_millis(300);

async fn open_at_start(spec: &TableSpec) -> Result<Option<Table>, SinkError> {
    let started = std::time::Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match spec.open().await {
            Ok((table, opened)) => {
                tracing::info!(table = %table.url(), version = table.version(), ?opened, "offline table ready");
                return Ok(Some(table));
            }
            Err(TableError::Refused(why)) => {
                return Err(SinkError::fatal(format!(
                    "offline table: refusing to start: {why}"
                )))
            }
            Err(e) if started.elapsed() < OPEN_RETRY_FOR => {
                tracing::debug!(error = %e, attempt, "offline table not readable yet; trying again");
                tokio::time::sleep(OPEN_RETRY_DELAY).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "offline table not readable yet; its lane keeps trying");
                return Ok(None);
            }
        }
    }
}
