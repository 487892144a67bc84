//! Where a pipeline's aggregations find their events in its table: what the training sets
//! and the audit of aggregated features read.

use super::aggregations::DEFAULT_FUTURE_SKEW_MS;
use super::PipelineConfig;
use crate::delta::PartitionTime;
use crate::training::EventSource;

impl PipelineConfig {
    /// Where its aggregations find their events in its table; `None` when it declares none.
    pub fn event_source(&self) -> Option<EventSource> {
        if self.aggregations.is_empty() {
            return None;
        }
        Some(EventSource {
            keys: self.entity_keys.clone(),
            event_time: self.event_time.clone(),
            aggregations: self.aggregations.clone(),
            max_future_skew_ms: self.max_future_skew_ms.unwrap_or(DEFAULT_FUTURE_SKEW_MS),
            partitioned_by_ingest: self
                .sinks
                .offline
                .as_ref()
                .is_some_and(|o| o.partition_by == PartitionTime::IngestTime),
        })
    }
}
