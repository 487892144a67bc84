//! Backfill: a lane over a finite source (non-durable Pulsar readers from the first retained
//! message, or a time) into a pipeline's offline table only, through the same decode, dead
//! letter, retry and commit path as the live pipeline. Idempotent, also next to a running
//! pipeline: rows of messages the table already holds are skipped, and a commit that races
//! the live pipeline's commit of the same partition is re-checked.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{DeadLetter, DeadLetterTarget, Lane, RuntimeError};
use crate::config::{PipelineConfig, ServiceConfig};
use crate::delta::DeltaSinkBuilder;
use crate::health::Health;
use crate::metrics::{LaneLabels, Metrics};
use crate::pulsar::SchemaRegistry;
use crate::pulsar::{
    resolve_partitions, PublishRange, PulsarAdmin, PulsarReaderSource, PulsarSource, TopicName,
};
use crate::schema::{PayloadDecoder, TopicDecoders};
use crate::sink::{SinkBuilder, SinkContext};

/// What to read.
#[derive(Debug, Clone)]
pub struct BackfillRange {
    /// Messages published at or after this time (epoch ms); `None` = from the first.
    pub from_ms: Option<u64>,
    /// Messages published at or before this time; `None` = up to the last message at start.
    pub to_ms: Option<u64>,
    /// Offline store URL to write to instead of the pipeline's.
    pub offline_url: Option<String>,
}

/// What a backfill did.
#[derive(Debug, Default, Clone)]
pub struct BackfillSummary {
    /// Messages read from the topic.
    pub messages: u64,
    /// Rows handed to the offline sink (before skipping rows already committed).
    pub rows: u64,
    /// Messages that could not be decoded (not written; published to the dead-letter topic).
    pub undecodable: u64,
    /// Files in the table afterwards.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The table version afterwards.
    pub version: u64,
    /// Why nothing could be read, when the topic retains nothing (e.g. retention).
    pub nothing_retained: Option<String>,
    /// Rows not written because they do not continue from what the table holds (a range that
    /// starts after it): the live pipeline writes them.
    pub left_out: u64,
    /// Seconds taken.
    pub seconds: f64,
}

/// Runs the backfill, calling `progress(messages_so_far, estimated_total)` as it goes;
/// `cancel` (e.g. Ctrl-C) stops it after committing what it has read.
pub async fn backfill(
    service: &ServiceConfig,
    pipeline: &PipelineConfig,
    root: &std::path::Path,
    range: &BackfillRange,
    cancel: CancellationToken,
    progress: impl Fn(u64, Option<u64>),
) -> Result<BackfillSummary, RuntimeError> {
    let started = Instant::now();
    let setup = |message: String| RuntimeError::Setup {
        pipeline: pipeline.name.clone(),
        message,
    };
    let mut offline = pipeline
        .sinks
        .offline
        .clone()
        .ok_or_else(|| setup("the pipeline has no offline sink".into()))?;
    if let Some(url) = &range.offline_url {
        let unknown = serde_saphyr::Location::UNKNOWN;
        offline.url = Some(crate::config::Spanned::new(url.clone(), unknown, unknown));
    }
    let admin = service.pulsar.admin()?;
    let template = PayloadDecoder::new(pipeline.decoder_spec(), SchemaRegistry::new(admin.clone()))
        .map_err(|e| setup(format!("reader schema: {e}")))?;
    let decoder = TopicDecoders::new(template, Vec::new());
    let metrics = Arc::new(Metrics::new());
    let context = SinkContext {
        pipeline: pipeline.name.clone(),
        rows: pipeline.row_layout(),
        output_schema: decoder.output_schema(),
        schema_fingerprint: pipeline.schema.fingerprint(),
        root: root.to_path_buf(),
        metrics: metrics.clone(),
        health: Arc::new(Health::default()),
        cancel: cancel.clone(),
        offline_origins: super::offline_origins(service),
        tie_break: service.pulsar.replication.is_some(),
    };
    let builder = DeltaSinkBuilder {
        service: service.object_store.clone(),
        config: offline,
        // A range that starts after what the table holds must not claim the messages before it.
        gap_grace: Some(Duration::MAX),
    };
    let sink = builder
        .build(&context)
        .await
        .map_err(|e| setup(e.to_string()))?;

    let pulsar = PulsarSource::connect(&service.pulsar).await?;
    let partitions = resolve_partitions(&pulsar, &pipeline.source)
        .await
        .map_err(|e| setup(format!("cannot list the topics: {e}")))?;
    let mut estimate = None;
    for partition in &partitions {
        let count = topic_message_count(&admin, partition).await;
        estimate = Some(estimate.unwrap_or(0) + count.unwrap_or(0));
    }
    let estimate = estimate.filter(|n| *n > 0);
    let source = PulsarReaderSource::new(
        pulsar.clone(),
        partitions.clone(),
        PublishRange {
            from_ms: range.from_ms,
            to_ms: range.to_ms,
        },
        service.pulsar.replication.as_ref(),
    );
    let read = source.read_counter();
    let lane = Lane {
        pipeline: pipeline.name.clone(),
        source: Box::new(source),
        decoder,
        sinks: vec![sink],
        dead_letter: Some(DeadLetter::new(
            pulsar,
            admin.clone(),
            DeadLetterTarget::of(&pipeline.source),
            &pipeline.name,
            cancel.clone(),
        )),
        max_batch: pipeline.source.max_batch_messages.max(1),
        linger: pipeline.source.max_batch_wait,
        cancel,
        metrics: metrics.clone(),
        health: context.health.clone(),
    };
    let name = lane.name();
    let running = lane.run_to_end();
    tokio::pin!(running);
    let mut ticks = tokio::time::interval(Duration::from_millis(200));
    let (outcome, sinks) = loop {
        tokio::select! {
            finished = &mut running => break finished,
            _ = ticks.tick() => progress(read.load(Ordering::Relaxed), estimate),
        }
    };
    outcome?;
    let messages = read.load(Ordering::Relaxed);
    progress(messages, estimate);
    let labels = LaneLabels {
        pipeline: pipeline.name.clone(),
        sink: name,
    };
    let received = metrics.messages_received.get_or_create(&labels).get();
    let decoded = metrics.messages_decoded.get_or_create(&labels).get();
    let mut summary = BackfillSummary {
        messages,
        rows: metrics.rows_written.get_or_create(&labels).get(),
        undecodable: received.saturating_sub(decoded),
        left_out: sinks.iter().map(|sink| sink.pending_rows() as u64).sum(),
        ..BackfillSummary::default()
    };
    let spec = builder
        .table_spec(&context)
        .map_err(|e| setup(e.to_string()))?;
    let (table, _) = spec.open().await.map_err(|e| setup(e.to_string()))?;
    let files = table
        .active_files()
        .await
        .map_err(|e| setup(e.to_string()))?;
    summary.files = files.len();
    summary.bytes = files.iter().map(|f| f.size).sum();
    summary.version = table.version();
    if summary.messages == 0 {
        summary.nothing_retained = retention_hint(&admin, &partitions).await;
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// Messages published to the topic (broker stats), for the progress bar's ETA.
async fn topic_message_count(admin: &PulsarAdmin, topic: &str) -> Option<u64> {
    let stats = admin.topic_stats(topic).await.ok()?;
    stats["msgInCounter"].as_u64().filter(|n| *n > 0)
}

/// Why a topic that has been published to gave a backfill nothing: Pulsar deletes messages
/// every subscription acknowledged unless the namespace (or topic) retains them.
async fn retention_hint(admin: &PulsarAdmin, partitions: &[String]) -> Option<String> {
    let mut published = 0;
    for partition in partitions {
        published += topic_message_count(admin, partition).await.unwrap_or(0);
    }
    let topic = partitions.first()?;
    let namespace = TopicName::parse(topic).ok()?.namespace_path();
    let retention = admin
        .namespace_retention(&namespace)
        .await
        .unwrap_or_default();
    let minutes = retention["retentionTimeInMinutes"].as_i64().unwrap_or(0);
    let megabytes = retention["retentionSizeInMB"].as_i64().unwrap_or(0);
    let published = if published > 0 {
        format!("{published} messages were published to it since the broker started, but ")
    } else {
        String::new()
    };
    Some(format!(
        "the topic retains no messages: {published}namespace {namespace} keeps acknowledged messages for {minutes} minutes / {megabytes} MB (retention), so once every subscription (the live pipeline's too) acknowledged them they were deleted. To backfill later, keep them: `pulsar-admin namespaces set-retention {namespace} --time 7d --size 10G` (or PUT {{\"retentionTimeInMinutes\": 10080, \"retentionSizeInMB\": 10240}} to /admin/v2/namespaces/{namespace}/retention)"
    ))
}
