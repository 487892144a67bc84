//! Backfill: read a topic from the start (or a time) with a non-durable Pulsar reader into a
//! pipeline's offline table only, through the same commit path as the live pipeline. Idempotent,
//! also next to a running pipeline: rows of messages the table already holds are skipped, and a
//! commit that races the live pipeline's commit of the same partition is re-checked.

use std::time::Instant;

use futures::StreamExt;
use pulsar::consumer::{ConsumerOptions, InitialPosition};
use pulsar::reader::Reader;
use pulsar::{Pulsar, TokioExecutor};
use tokio_util::sync::CancellationToken;

use super::RuntimeError;
use crate::config::{PipelineConfig, ServiceConfig};
use crate::record::RowBatch;
use crate::schema::{PayloadDecoder, SchemaRegistry, TopicDecoders};
use crate::sink::delta::{DeltaSink, OfflineStore, TableError, TableSpec};
use crate::sink::Sink;
use crate::source::pulsar::{
    resolve_partitions, MessagePosition, PulsarAdmin, PulsarSource, TopicName,
};
use crate::source::SourceMessage;

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
    /// Messages that could not be decoded (not written; the live pipeline dead-letters them).
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

/// Runs the backfill, calling `progress(messages_so_far, estimated_total)` as it goes.
pub async fn backfill(
    service: &ServiceConfig,
    pipeline: &PipelineConfig,
    root: &std::path::Path,
    range: &BackfillRange,
    progress: impl Fn(u64, Option<u64>),
) -> Result<BackfillSummary, RuntimeError> {
    let started = Instant::now();
    let setup = |message: String| RuntimeError::Setup {
        pipeline: pipeline.name.clone(),
        message,
    };
    let offline = pipeline
        .offline
        .clone()
        .ok_or_else(|| setup("the pipeline has no offline sink".into()))?;
    let admin = service.pulsar.admin().map_err(setup)?;
    let spec = pipeline.decoder_spec();
    let template = PayloadDecoder::new(spec, SchemaRegistry::new(admin.clone()))
        .map_err(|e| setup(format!("reader schema: {e}")))?;
    let mut decoder = TopicDecoders::new(template, Vec::new());
    let url = range
        .offline_url
        .clone()
        .or_else(|| offline.url.as_ref().map(|u| u.value.clone()))
        .unwrap_or_else(|| service.offline.default_url.clone());
    let store = OfflineStore::open(&url, root, &service.offline.options)
        .map_err(|e| setup(e.to_string()))?;
    let spec = TableSpec::new(
        &store,
        &pipeline.name,
        &decoder.output_schema(),
        &pipeline.event_time,
        &offline,
    )
    .map_err(|e| setup(format!("offline table: {e}")))?;
    let (table, _) = spec.open().await.map_err(|e| match e {
        TableError::Refused(why) => setup(format!("offline table: {why}")),
        other => setup(format!("offline table: {other}")),
    })?;
    let mut sink = DeltaSink::new(spec.clone(), offline, Some(table), CancellationToken::new());
    // A range that starts after what the table holds must not claim the messages before it.
    sink.set_gap_grace(std::time::Duration::MAX);
    sink.set_schema_fingerprint(pipeline.schema.fingerprint());
    sink.start().await.map_err(|e| setup(e.to_string()))?;

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
    let mut summary = BackfillSummary::default();
    let mut batches = BatchTarget {
        decoder: &mut decoder,
        sink: &mut sink,
        max_batch: pipeline.source.max_batch_messages.max(1),
    };
    for partition in &partitions {
        read_partition(&pulsar, partition, range, &mut batches, &mut summary, |n| {
            progress(n, estimate)
        })
        .await
        .map_err(|e| setup(format!("{partition}: {e}")))?;
    }
    sink.flush().await.map_err(|e| setup(e.to_string()))?;
    summary.left_out = sink.buffered_rows() as u64;
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

/// Where a backfill's batches go.
struct BatchTarget<'a> {
    decoder: &'a mut TopicDecoders,
    sink: &'a mut DeltaSink,
    max_batch: usize,
}

/// Reads one topic partition from its start up to its last message at the time of the call.
async fn read_partition(
    pulsar: &Pulsar<TokioExecutor>,
    partition: &str,
    range: &BackfillRange,
    target: &mut BatchTarget<'_>,
    summary: &mut BackfillSummary,
    progress: impl Fn(u64),
) -> Result<(), String> {
    let mut reader = open_reader(pulsar, partition)
        .await
        .map_err(|e| format!("cannot open a reader: {e}"))?;
    let last = reader
        .get_last_message_id()
        .await
        .map_err(|e| format!("cannot read the last message id: {e}"))?;
    // An empty topic answers with entry -1 (as u64::MAX).
    let mut done = last.entry_id == u64::MAX || last.ledger_id == u64::MAX;
    while !done {
        let mut messages: Vec<SourceMessage> = Vec::with_capacity(target.max_batch);
        while messages.len() < target.max_batch && !done {
            let Some(next) = reader.next().await else {
                done = true;
                break;
            };
            let message = next.map_err(|e| format!("reading the topic: {e}"))?;
            let id = message.message_id.id.clone();
            let position = MessagePosition {
                topic: message.topic.clone(),
                id: id.clone(),
                batch_size: message.message_id.batch_size,
            };
            let at_end = (id.ledger_id, id.entry_id) >= (last.ledger_id, last.entry_id)
                && position.completes_entry();
            let published = message.payload.metadata.publish_time;
            let in_range = range.from_ms.is_none_or(|from| published >= from);
            if range.to_ms.is_some_and(|to| published > to) {
                done = true;
                break;
            }
            summary.messages += 1;
            if in_range {
                messages.push(PulsarSource::message(message));
            }
            done |= at_end;
        }
        if !messages.is_empty() {
            let decoded = target
                .decoder
                .decode(&messages)
                .await
                .map_err(|e| e.to_string())?;
            summary.undecodable += decoded.failures.len() as u64;
            summary.rows += decoded.rows.num_rows() as u64;
            target
                .sink
                .write(RowBatch {
                    rows: decoded.rows,
                    publish_times_ms: messages.iter().map(|m| m.publish_time_ms).collect(),
                    positions: messages.into_iter().map(|m| m.position).collect(),
                    row_positions: decoded.row_messages,
                })
                .await
                .map_err(|e| e.to_string())?;
        }
        progress(summary.messages);
    }
    Ok(())
}

async fn open_reader(
    pulsar: &Pulsar<TokioExecutor>,
    topic: &str,
) -> Result<Reader<Vec<u8>, TokioExecutor>, pulsar::Error> {
    pulsar
        .reader()
        .with_topic(topic)
        .with_subscription(format!(
            "feature-connector-backfill-{}",
            uuid::Uuid::new_v4()
        ))
        .with_options(ConsumerOptions {
            initial_position: InitialPosition::Earliest,
            ..Default::default()
        })
        .into_reader()
        .await
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
