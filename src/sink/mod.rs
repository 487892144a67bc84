//! Sinks: where decoded rows become durable. A new sink is a folder here with its config
//! struct and an implementation of [`Sink`]; the pipeline runtime wires it to a lane.

pub mod delta;
pub mod redis;

use async_trait::async_trait;

use crate::record::RowBatch;
use crate::source::MessagePosition;

/// Why a sink gave up on a batch.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Shutdown was requested while the sink was still retrying; nothing was acknowledged
    /// for the rows it had not made durable.
    #[error("cancelled while {0}")]
    Cancelled(String),
    /// The sink cannot work with this data or setup; retrying will not help.
    #[error("{0}")]
    Fatal(String),
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

    /// Gets ready before the first batch (e.g. reads what earlier runs committed), retrying
    /// while its service is down so that one pipeline's store does not stop the process.
    async fn start(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    /// Takes a batch; returns the positions that are durable now (possibly from earlier
    /// batches, possibly none while a file is still open).
    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError>;

    /// Called regularly even without traffic, for time-based work such as rollover.
    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError>;

    /// Makes everything taken so far durable (shutdown).
    async fn flush(&mut self) -> Result<Vec<MessagePosition>, SinkError>;
}
