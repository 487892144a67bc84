//! What the source itself skipped: entries of a stream that its consumers never see (e.g.
//! Pulsar's transaction and replicated-subscription markers, aborted transactional messages,
//! messages expired by a TTL) and that the source marks as done on its own. A sink that
//! waits for every message in order asks this before it waits on a gap: a gap the source
//! made never fills, while one left by another writer's messages still does.

use async_trait::async_trait;

use super::Offset;

/// Why the source could not say what it skipped (the caller then treats the gap as unknown).
#[derive(Debug, thiserror::Error)]
#[error("cannot tell what the source skipped in {stream}: {source}")]
pub struct SkippedEntriesError {
    /// The stream asked about.
    pub stream: String,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

/// Answers whether the entries of a gap in a stream were skipped by the source.
#[async_trait]
pub trait SkippedEntries: Send + Sync {
    /// For each gap `(after, before)` of `stream`: whether every entry strictly between the
    /// entry of `after` and the entry of `before` is one the source marked done itself (the
    /// batch indexes are ignored: the caller asks only about gaps between whole entries).
    /// One answer per gap, in order; `false` where the source cannot vouch for a gap.
    async fn skipped(
        &self,
        stream: &str,
        gaps: &[(Offset, Offset)],
    ) -> Result<Vec<bool>, SkippedEntriesError>;

    /// Whether every entry of `stream` before the entry of `first` is marked done (skipped
    /// by the source, or acknowledged: made durable by whoever received it): asked about
    /// the first message a sink receives from a stream, when nothing before it is known.
    async fn done_before(&self, stream: &str, first: Offset) -> Result<bool, SkippedEntriesError>;
}
