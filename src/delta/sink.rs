//! How the Delta offline sink plugs into the runtime: the pipeline file's `offline:` section
//! ([`DeltaSinkConfig`]) with its checks, and the builder of the running sink.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;

use super::{
    check_store_url, desired_schema, DeltaSink, DeltaSinkConfig, Granularity, ObjectStoreProbe,
    ObjectStoreServiceConfig, Table, TableError, TableRoot, TableSpec,
};
use crate::sink::{PipelineShape, Sink, SinkBuilder, SinkContext, SinkError, SinkSection};
use crate::source::AckMode;
use crate::yaml::{issue_at, ConfigIssue};

impl SinkSection for DeltaSinkConfig {
    type Service = ObjectStoreServiceConfig;

    fn enabled(&self) -> bool {
        self.enabled
    }

    fn check(&self, pipeline: &PipelineShape<'_>) -> Vec<ConfigIssue> {
        let file = pipeline.file;
        let mut issues = Vec::new();
        if let Some(url) = &self.url {
            if let Err(message) = check_store_url(&url.value) {
                issues.push(issue_at(file, url, "offline.url", message));
            }
        }
        let plain = |key: &str, message: &str| ConfigIssue::at_key(file, key, message);
        if self.rollover_rows == 0 {
            issues.push(plain("offline.rollover_rows", "must be at least 1"));
        }
        if self.rollover_interval.is_zero() {
            issues.push(plain("offline.rollover_interval", "must be positive"));
        }
        if !(1..=22).contains(&self.zstd_level) {
            issues.push(plain("offline.zstd_level", "must be between 1 and 22"));
        }
        if self.row_group_rows == 0 {
            issues.push(plain("offline.row_group_rows", "must be at least 1"));
        }
        if self.checkpoint_interval == 0 {
            issues.push(plain("offline.checkpoint_interval", "must be at least 1"));
        }
        if let Some(types) = pipeline.types {
            issues.extend(table_issues(pipeline, types, self.partition_granularity));
        }
        issues
    }

    fn builder(&self, service: &ObjectStoreServiceConfig) -> Box<dyn SinkBuilder> {
        Box::new(DeltaSinkBuilder {
            service: service.clone(),
            config: self.clone(),
            gap_grace: None,
        })
    }
}

/// Fields the Delta table cannot take (a name it adds itself, a type Delta lacks).
fn table_issues(
    pipeline: &PipelineShape<'_>,
    types: &[(String, DataType)],
    granularity: Granularity,
) -> Vec<ConfigIssue> {
    let wanted = |name: &str| {
        pipeline.keys.iter().any(|k| k == name)
            || name == pipeline.event_time
            || pipeline.features.iter().any(|f| f == name)
    };
    let fields: Vec<Field> = types
        .iter()
        .filter(|(name, _)| wanted(name))
        .map(|(name, data_type)| Field::new(name, data_type.clone(), true))
        .collect();
    match desired_schema(&Schema::new(fields), pipeline.event_time, granularity) {
        Ok(_) => Vec::new(),
        Err(e) => vec![ConfigIssue::at_key(
            pipeline.file,
            "offline",
            format!("the offline table cannot take the schema: {e}"),
        )],
    }
}

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
