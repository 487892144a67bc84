//! Prometheus metrics, labelled per pipeline and sink lane, and the process's readiness.

mod consistency;

pub use consistency::{
    AuditFeatureLabels, AuditOutcomeLabels, AuditRunLabels, ConsistencyMetrics, FeatureLogLabels,
    FloatGauge, ServedRowLabels,
};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Labels of offline store request counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreRequestLabels {
    /// Pipeline name.
    pub pipeline: String,
    /// `get`, `head`, `put`, `list`, `delete`, `copy`.
    pub operation: &'static str,
    /// `log` (the table's `_delta_log`) or `data` (data files, and listings outside the log).
    pub target: &'static str,
}

/// Labels of per-lane metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaneLabels {
    /// Pipeline name.
    pub pipeline: String,
    /// Sink kind (`online`, `offline`), or the kinds a lane feeds joined by `+`.
    pub sink: String,
}

/// Labels of dead-letter counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeadLetterLabels {
    /// Pipeline name.
    pub pipeline: String,
    /// Why the message could not be decoded.
    pub reason: String,
}

/// Labels of feature-read request counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServingLabels {
    /// `get-online-features`, `v1-features` or `other`.
    pub endpoint: &'static str,
    /// The HTTP status answered (`200`, `401`, `413`, `429`, …).
    pub code: u16,
}

/// Labels of the serving cache's entity reads.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `hit` (answered from memory) or `miss` (read from Redis).
    pub outcome: &'static str,
}

/// Labels of aggregation event counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AggregationLabels {
    /// Pipeline name.
    pub pipeline: String,
    /// `applied`, `already_held` (a redelivered event) or `late` (no window covers it).
    pub outcome: &'static str,
}

/// A histogram of latencies: 0.5 ms … ~65 s, four buckets per doubling (a p99 of 9 ms and
/// one of 15 ms fall in different buckets; with one bucket per doubling both read "≤ 16 ms").
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2f64.powf(0.25), 69))
}

/// Labels of the aggregations' update phases.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpdatePhaseLabels {
    /// Pipeline name.
    pub pipeline: String,
    /// `apply` (decoding, applying, encoding in the process), `write` (the script calls'
    /// round trip) or `redo` (entities whose hash was not what the update started from).
    pub phase: &'static str,
}

/// Labels of per-pipeline metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PipelineLabels {
    /// Pipeline name.
    pub pipeline: String,
}

/// Every metric the process exports.
pub struct Metrics {
    registry: Registry,
    /// Messages taken from the subscription.
    pub messages_received: Family<LaneLabels, Counter>,
    /// Messages that decoded into rows.
    pub messages_decoded: Family<LaneLabels, Counter>,
    /// Messages per processing batch.
    pub batch_messages: Family<LaneLabels, Histogram>,
    /// Messages received and not acknowledged yet (in a sink's buffer or in flight).
    pub messages_in_flight: Family<LaneLabels, Gauge>,
    /// The lane's subscription backlog, from the broker's topic stats.
    pub subscription_backlog_messages: Family<LaneLabels, Gauge>,
    /// Parquet files committed to the offline store.
    pub parquet_files_written: Family<PipelineLabels, Counter>,
    /// Bytes of those files.
    pub parquet_bytes_written: Family<PipelineLabels, Counter>,
    /// Offline commits (rollovers) that landed in the table.
    pub offline_commits: Family<PipelineLabels, Counter>,
    /// Time from the start of a rollover's commit (file encoding included) to its landing.
    pub offline_commit_seconds: Family<PipelineLabels, Histogram>,
    /// Commits that found another writer's commit at their version and were retried after a
    /// refresh.
    pub offline_commit_conflicts: Family<PipelineLabels, Counter>,
    /// Rows skipped because the table already held their messages (redelivery, hand-over).
    pub offline_rows_skipped: Family<PipelineLabels, Counter>,
    /// Events of the aggregations' tiles, by outcome.
    pub aggregation_events: Family<AggregationLabels, Counter>,
    /// Tile updates that found another writer's update first and were done again.
    pub aggregation_update_conflicts: Family<PipelineLabels, Counter>,
    /// Messages the aggregations held back behind a gap in their stream (a hand-over that
    /// delivered newer messages first) until the gap was filled or done.
    pub aggregation_held_messages: Family<PipelineLabels, Counter>,
    /// Time of each phase of the aggregations' tile updates, one sample per batch and phase.
    pub aggregation_update_seconds: Family<UpdatePhaseLabels, Histogram>,
    /// The table version the sink last saw.
    pub offline_table_version: Family<PipelineLabels, Gauge>,
    /// Requests to the offline store, by operation and target.
    pub offline_store_requests: Family<StoreRequestLabels, Counter>,
    /// Rows handed to the sink.
    pub rows_written: Family<LaneLabels, Counter>,
    /// Messages acknowledged after their sink made them durable.
    pub messages_acked: Family<LaneLabels, Counter>,
    /// Messages published to the dead-letter topic.
    pub dead_lettered: Family<DeadLetterLabels, Counter>,
    /// Time a sink took to take a batch (including retries while its service is down).
    pub sink_write_seconds: Family<LaneLabels, Histogram>,
    /// Time the lane spent handing batches to a sink's queue, waiting for room included (it
    /// grows fast for the sink that holds the lane up: backpressure).
    pub sink_queue_wait_seconds: Family<LaneLabels, Counter<f64, AtomicU64>>,
    /// Seconds the lane has waited for its sinks: since its last acknowledgement while
    /// messages wait, 0 otherwise (set at each scrape).
    pub ack_wait_seconds: Family<LaneLabels, Gauge<f64, AtomicU64>>,
    /// How long the lane may normally wait (its longest hold plus slack); a longer wait is a
    /// stall.
    pub ack_wait_limit_seconds: Family<LaneLabels, Gauge<f64, AtomicU64>>,
    /// Event time → value acknowledged by the online store.
    pub freshness_event_time_seconds: Family<LaneLabels, Histogram>,
    /// Broker publish time → value acknowledged by the online store.
    pub freshness_publish_time_seconds: Family<LaneLabels, Histogram>,
    /// Feature reads answered by the serving listener, by endpoint and status (refusals
    /// included).
    pub serving_requests: Family<ServingLabels, Counter>,
    /// Entity reads of the serving cache (`serving.cache_entities`), by outcome.
    pub serving_cache_reads: Family<CacheLabels, Counter>,
    /// Cached rows dropped because Redis said their key changed, or because the connection
    /// that heard of changes was replaced (rows dropped to make room are not counted).
    pub serving_cache_invalidations: Counter,
    /// Audit, freshness, coverage and feature-log metrics.
    pub consistency: ConsistencyMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `feature_connector` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("feature_connector");
        let messages_received = Family::<LaneLabels, Counter>::default();
        let rows_written = Family::<LaneLabels, Counter>::default();
        let messages_acked = Family::<LaneLabels, Counter>::default();
        let dead_lettered = Family::<DeadLetterLabels, Counter>::default();
        let messages_decoded = Family::<LaneLabels, Counter>::default();
        let messages_in_flight = Family::<LaneLabels, Gauge>::default();
        let subscription_backlog_messages = Family::<LaneLabels, Gauge>::default();
        let parquet_files_written = Family::<PipelineLabels, Counter>::default();
        let parquet_bytes_written = Family::<PipelineLabels, Counter>::default();
        let offline_commits = Family::<PipelineLabels, Counter>::default();
        let offline_commit_conflicts = Family::<PipelineLabels, Counter>::default();
        let offline_rows_skipped = Family::<PipelineLabels, Counter>::default();
        let offline_table_version = Family::<PipelineLabels, Gauge>::default();
        let aggregation_events = Family::<AggregationLabels, Counter>::default();
        registry.register(
            "aggregation_events",
            "Events of the aggregations' tiles: applied, already held (redelivered) or late",
            aggregation_events.clone(),
        );
        let aggregation_update_conflicts = Family::<PipelineLabels, Counter>::default();
        registry.register(
            "aggregation_update_conflicts",
            "Tile updates that found another writer's update first and were done again",
            aggregation_update_conflicts.clone(),
        );
        let aggregation_held_messages = Family::<PipelineLabels, Counter>::default();
        registry.register(
            "aggregation_held_messages",
            "Messages the aggregations held back behind a gap in their stream until it was done",
            aggregation_held_messages.clone(),
        );
        let offline_store_requests = Family::<StoreRequestLabels, Counter>::default();
        registry.register(
            "offline_store_requests",
            "Requests to the offline object store, by operation and target (log or data)",
            offline_store_requests.clone(),
        );
        // 1 ms … ~65 s.
        let offline_commit_seconds =
            Family::<PipelineLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 17))
            });
        registry.register(
            "offline_commits",
            "Rollovers committed to the offline Delta table",
            offline_commits.clone(),
        );
        registry.register(
            "offline_commit_seconds",
            "Rollover commit time, file encoding and conflict retries included",
            offline_commit_seconds.clone(),
        );
        registry.register(
            "offline_commit_conflicts",
            "Commits that found another writer's commit at their version and were retried",
            offline_commit_conflicts.clone(),
        );
        registry.register(
            "offline_rows_skipped",
            "Rows not written because the table already held their messages",
            offline_rows_skipped.clone(),
        );
        registry.register(
            "offline_table_version",
            "Version of the offline Delta table the sink last saw",
            offline_table_version.clone(),
        );
        // 1 … 16384 messages.
        let batch_messages = Family::<LaneLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(1.0, 2.0, 15))
        });
        registry.register(
            "messages_decoded",
            "Messages that decoded into rows",
            messages_decoded.clone(),
        );
        registry.register(
            "batch_messages",
            "Messages per processing batch",
            batch_messages.clone(),
        );
        registry.register(
            "messages_in_flight",
            "Messages received and not acknowledged yet",
            messages_in_flight.clone(),
        );
        registry.register(
            "subscription_backlog_messages",
            "Backlog of the lane's subscription, from the broker's topic stats",
            subscription_backlog_messages.clone(),
        );
        registry.register(
            "parquet_files_written",
            "Parquet files committed to the offline store",
            parquet_files_written.clone(),
        );
        registry.register(
            "parquet_bytes_written",
            "Bytes of the Parquet files committed to the offline store",
            parquet_bytes_written.clone(),
        );
        let latency = || Family::<LaneLabels, Histogram>::new_with_constructor(latency_histogram);
        let sink_write_seconds = latency();
        let aggregation_update_seconds =
            Family::<UpdatePhaseLabels, Histogram>::new_with_constructor(latency_histogram);
        registry.register(
            "aggregation_update_seconds",
            "Each phase of the aggregations' tile updates: apply, write or redo",
            aggregation_update_seconds.clone(),
        );
        let freshness_event_time_seconds = latency();
        let freshness_publish_time_seconds = latency();
        registry.register(
            "freshness_event_time_seconds",
            "Event time to the value being acknowledged by the online store",
            freshness_event_time_seconds.clone(),
        );
        registry.register(
            "freshness_publish_time_seconds",
            "Broker publish time to the value being acknowledged by the online store",
            freshness_publish_time_seconds.clone(),
        );
        registry.register(
            "messages_received",
            "Messages taken from the subscription",
            messages_received.clone(),
        );
        registry.register(
            "rows_written",
            "Rows handed to the sink",
            rows_written.clone(),
        );
        registry.register(
            "messages_acked",
            "Messages acknowledged after the sink made them durable",
            messages_acked.clone(),
        );
        registry.register(
            "dead_letter_messages",
            "Messages sent to the dead-letter topic",
            dead_lettered.clone(),
        );
        registry.register(
            "sink_write_seconds",
            "Time a sink took to take a batch, retries included",
            sink_write_seconds.clone(),
        );
        let sink_queue_wait_seconds = Family::<LaneLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "sink_queue_wait_seconds",
            "Time the lane spent handing batches to the sink's queue, waiting for room included",
            sink_queue_wait_seconds.clone(),
        );
        let ack_wait_seconds = Family::<LaneLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "ack_wait_seconds",
            "Seconds the lane has waited for its sinks since its last acknowledgement while messages wait (0 otherwise)",
            ack_wait_seconds.clone(),
        );
        let ack_wait_limit_seconds = Family::<LaneLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "ack_wait_limit_seconds",
            "How long the lane may normally wait for its sinks (longest hold plus slack); longer is a stall",
            ack_wait_limit_seconds.clone(),
        );
        let serving_requests = Family::<ServingLabels, Counter>::default();
        registry.register(
            "serving_requests",
            "Feature reads answered by the serving listener, by endpoint and HTTP status",
            serving_requests.clone(),
        );
        let serving_cache_reads = Family::<CacheLabels, Counter>::default();
        registry.register(
            "serving_cache_reads",
            "Entity reads of the serving cache, by outcome (hit: answered from memory)",
            serving_cache_reads.clone(),
        );
        let serving_cache_invalidations = Counter::default();
        registry.register(
            "serving_cache_invalidations",
            "Cached rows dropped because Redis said their key changed or the connection that tracked them was replaced",
            serving_cache_invalidations.clone(),
        );
        let consistency = ConsistencyMetrics::register(&mut registry);
        Self {
            consistency,
            registry,
            ack_wait_seconds,
            ack_wait_limit_seconds,
            serving_requests,
            serving_cache_reads,
            serving_cache_invalidations,
            freshness_event_time_seconds,
            freshness_publish_time_seconds,
            messages_received,
            rows_written,
            messages_acked,
            dead_lettered,
            sink_write_seconds,
            sink_queue_wait_seconds,
            messages_decoded,
            batch_messages,
            messages_in_flight,
            subscription_backlog_messages,
            parquet_files_written,
            parquet_bytes_written,
            offline_commits,
            offline_commit_seconds,
            offline_commit_conflicts,
            offline_rows_skipped,
            aggregation_events,
            aggregation_update_conflicts,
            aggregation_held_messages,
            aggregation_update_seconds,
            offline_table_version,
            offline_store_requests,
        }
    }

    /// Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_exported_with_conventional_names() {
        let metrics = Metrics::new();
        let labels = LaneLabels {
            pipeline: "p".into(),
            sink: "online".into(),
        };
        metrics.messages_received.get_or_create(&labels).inc_by(3);
        metrics
            .sink_write_seconds
            .get_or_create(&labels)
            .observe(0.002);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"feature_connector_messages_received_total{pipeline="p",sink="online"} 3"#
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE feature_connector_sink_write_seconds histogram"),
            "{text}"
        );
    }
}
