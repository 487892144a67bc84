//! Sinks: where decoded rows become durable. A new sink is a folder here with its config
//! struct (a [`SinkSection`]), a [`SinkBuilder`] and an implementation of [`Sink`]; one line
//! in the `sinks!` list of `config/pipeline.rs` gives it its pipeline-file key, and the
//! runtime wires whatever a pipeline enables to a lane.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::health::Health;
use crate::metrics::Metrics;
use crate::record::{RowBatch, RowLayout};
use crate::source::{AckMode, MessagePosition, OfflineOrigins, SkippedEntries};
use crate::yaml::ConfigIssue;

/// What a sink section's checks know of the pipeline it belongs to.
pub struct PipelineShape<'a> {
    /// The pipeline file (for issues).
    pub file: &'a Path,
    /// Entity key fields.
    pub keys: &'a [String],
    /// Event-time field.
    pub event_time: &'a str,
    /// Feature fields.
    pub features: &'a [String],
    /// Every field of the reader schema with its Arrow type; `None` when the schema did not
    /// load (its own issue is reported), so checks that need types are skipped.
    pub types: Option<&'a [(String, DataType)]>,
}

/// A sink's section of a pipeline file (`online:`, `offline:`): its own checks and the
/// builder of the running sink. `Service` is the service-file section it reads.
pub trait SinkSection {
    /// The service file's settings this sink needs (where its service is).
    type Service;

    /// `false` when the section is written but turned off (`enabled: false`).
    fn enabled(&self) -> bool;

    /// Problems a YAML parser cannot see, including ones against the pipeline's schema.
    fn check(&self, pipeline: &PipelineShape<'_>) -> Vec<ConfigIssue>;

    /// The builder the runtime turns into this pipeline's running sink.
    fn builder(&self, service: &Self::Service) -> Box<dyn SinkBuilder>;
}

/// What the runtime hands every sink builder of a pipeline.
pub struct SinkContext {
    /// Pipeline name.
    pub pipeline: String,
    /// Where keys, event time and features are in the rows.
    pub rows: RowLayout,
    /// The Arrow schema of the decoded rows.
    pub output_schema: SchemaRef,
    /// Fingerprint of the pipeline's reader schema (recorded with written data).
    pub schema_fingerprint: String,
    /// Project root that relative paths in the config are resolved against.
    pub root: PathBuf,
    /// Where counts go.
    pub metrics: Arc<Metrics>,
    /// Where the sink registers the probe of its service for `/readyz`.
    pub health: Arc<Health>,
    /// Shutdown signal.
    pub cancel: CancellationToken,
    /// Which messages' rows a sink that keeps every event once (the offline table) takes
    /// when the source replicates from other clusters.
    pub offline_origins: OfflineOrigins,
    /// Whether a latest-wins store breaks ties between equal event times by publish time and
    /// origin cluster, so that every region's store ends the same (`pulsar.replication`).
    pub tie_break: bool,
}

/// The config side of a sink: builds the running sink of one pipeline.
#[async_trait]
pub trait SinkBuilder: Send + Sync {
    /// The sink's kind (`online`, `offline`): names its lane, subscription and metrics.
    fn kind(&self) -> &'static str;

    /// How a lane feeding this sink must acknowledge: `Cumulative` when the sink keeps
    /// positions per topic partition (one active consumer per partition), else `Individual`.
    fn acknowledgement(&self) -> AckMode {
        AckMode::Individual
    }

    /// Connects and checks what can be checked at start; a [`SinkError::Fatal`] stops the
    /// process before anything is consumed.
    async fn build(&self, context: &SinkContext) -> Result<Box<dyn Sink>, SinkError>;
}

/// Any error a sink keeps as the cause of a fatal one.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a sink gave up on a batch.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Shutdown was requested while the sink was still retrying; nothing was acknowledged
    /// for the rows it had not made durable.
    #[error("cancelled while {0}")]
    Cancelled(String),
    /// The sink cannot work with this data or setup; retrying will not help.
    #[error("{context}{}", source.as_ref().map(|s| format!(": {s}")).unwrap_or_default())]
    Fatal {
        /// What the sink was doing.
        context: String,
        /// The error that made it give up, when there is one.
        #[source]
        source: Option<BoxError>,
    },
}

impl SinkError {
    /// A fatal error without an underlying cause.
    pub fn fatal(context: impl Into<String>) -> Self {
        SinkError::Fatal {
            context: context.into(),
            source: None,
        }
    }

    /// A fatal error caused by `source` while doing `context`.
    pub fn fatal_from(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        SinkError::Fatal {
            context: context.into(),
            source: Some(source.into()),
        }
    }
}

/// A destination that makes rows durable and says which messages may be acknowledged.
///
/// Sinks retry a down service themselves (with backoff) and return only once the data is
/// durable, or when shutdown cancels them. Writes must be idempotent: a message may be
/// delivered again after a crash.
#[async_trait]
pub trait Sink: Send {
    /// Short name for logs and metrics (`online`, `offline`).
    fn kind(&self) -> &'static str;

    /// Whether values are readable by model services once `write` returns, so that the lane
    /// records their freshness (event and publish time to durable) for this sink.
    fn reports_freshness(&self) -> bool {
        false
    }

    /// Up to how many rows of batches waiting in its queue the sink takes as one `write`
    /// (0: one batch per write). A latest-wins store gains from it when it falls behind:
    /// the newest value per entity of a larger batch is fewer writes.
    fn merge_queued_rows(&self) -> usize {
        0
    }

    /// How long the sink may normally hold a message before it is durable (the offline
    /// sink: a rollover interval); a lane that waits much longer for it is stalled.
    fn longest_hold(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// Rows taken but not durable (still buffered); after `flush`, rows the sink could not
    /// make durable (e.g. the offline sink's rows after a gap in a partition).
    fn pending_rows(&self) -> usize {
        0
    }

    /// Gets ready before the first batch (e.g. reads what earlier runs committed), retrying
    /// while its service is down so that one pipeline's store does not stop the process.
    async fn start(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    /// Tells the sink how to learn which gaps in a stream the source made itself (entries
    /// its consumers never see); a sink that waits on gaps commits past those at once. The
    /// default ignores it.
    fn set_skipped_entries(&mut self, probe: Arc<dyn SkippedEntries>) {
        let _ = probe;
    }

    /// Takes a batch; returns the positions that are durable now (possibly from earlier
    /// batches, possibly none while a file is still open).
    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError>;

    /// Called regularly even without traffic, for time-based work such as rollover.
    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError>;

    /// Makes everything taken so far durable (shutdown).
    async fn flush(&mut self) -> Result<Vec<MessagePosition>, SinkError>;
}
