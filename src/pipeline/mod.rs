//! The runtime: turns checked pipeline configs into lanes and runs them until shutdown.
//!
//! Each sink of a pipeline gets its own lane and its own durable subscription
//! (`<subscription>-online`, `<subscription>-offline`), so each acknowledges at its own pace
//! and one sink being down never stalls the other (see README, "Acknowledgements").

mod ack_gate;
mod backfill;
mod backlog;
mod dead_letter;
mod lane;

use std::path::Path;
use std::sync::Arc;

use pulsar::{Pulsar, TokioExecutor};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use backfill::{backfill, BackfillRange, BackfillSummary};
pub use backlog::{watch_backlogs, WatchedSubscription};
pub use dead_letter::DeadLetter;
pub use lane::{Lane, LaneError};

use crate::config::{PipelineConfig, ServiceConfig};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::schema::{schema_topic, PayloadDecoder, SchemaRegistry, TopicDecoders};
use crate::sink::delta::{DeltaSink, ObjectStoreProbe, OfflineStore, TableError, TableSpec};
use crate::sink::redis::{RedisClient, RedisProbe, RedisSink};
use crate::sink::Sink;
use crate::source::pulsar::{PulsarSource, SubscriptionKind};
use crate::source::{AckMode, SourceError};

/// The runtime could not start or a lane failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A pipeline could not be set up.
    #[error("pipeline `{pipeline}`: {message}")]
    Setup {
        /// Pipeline name.
        pipeline: String,
        /// What went wrong.
        message: String,
    },
    /// Pulsar could not be reached at start.
    #[error(transparent)]
    Source(Box<SourceError>),
    /// A lane stopped with an error.
    #[error(transparent)]
    Lane(Box<LaneError>),
}

impl From<SourceError> for RuntimeError {
    fn from(e: SourceError) -> Self {
        RuntimeError::Source(Box::new(e))
    }
}

impl From<LaneError> for RuntimeError {
    fn from(e: LaneError) -> Self {
        RuntimeError::Lane(Box::new(e))
    }
}

/// Starts every lane of every pipeline, then waits until `cancel` fires and all lanes have
/// flushed. The first lane error cancels the others and is returned.
pub async fn run(
    service: &ServiceConfig,
    pipelines: &[PipelineConfig],
    root: &Path,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    cancel: CancellationToken,
) -> Result<(), RuntimeError> {
    let http = service
        .pulsar
        .admin_client()
        .map_err(|message| RuntimeError::Setup {
            pipeline: "*".into(),
            message,
        })?;
    let pulsar = PulsarSource::connect(&service.pulsar).await?;
    if pipelines.iter().any(|p| p.online.is_some()) {
        let client = RedisClient::open(&service.redis).map_err(|message| RuntimeError::Setup {
            pipeline: "*".into(),
            message,
        })?;
        health.add_probe(Arc::new(RedisProbe { client }));
    }
    let mut lanes = Vec::new();
    for pipeline in pipelines {
        lanes.extend(
            build_lanes(
                service, pipeline, root, &pulsar, &http, &metrics, &health, &cancel,
            )
            .await?,
        );
    }
    health.expect_lanes(lanes.len());
    let watched = pipelines.iter().flat_map(watched_subscriptions).collect();
    let backlogs = tokio::spawn(watch_backlogs(
        pulsar.clone(),
        http.clone(),
        service.pulsar.admin_url.clone(),
        watched,
        metrics.clone(),
        cancel.clone(),
    ));
    let mut tasks = JoinSet::new();
    for lane in lanes {
        tasks.spawn(lane.run());
    }
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        let outcome = match joined {
            Ok(outcome) => outcome.map_err(RuntimeError::from),
            Err(e) => Err(RuntimeError::Setup {
                pipeline: "*".into(),
                message: format!("lane task panicked: {e}"),
            }),
        };
        if let Err(e) = outcome {
            tracing::error!(error = %e, "lane failed; stopping");
            cancel.cancel();
            first_error.get_or_insert(e);
        }
    }
    backlogs.abort();
    first_error.map_or(Ok(()), Err)
}

/// The subscriptions of a pipeline's lanes, for the backlog gauge.
fn watched_subscriptions(pipeline: &PipelineConfig) -> Vec<WatchedSubscription> {
    let lanes = [
        ("online", pipeline.online.is_some()),
        ("offline", pipeline.offline.is_some()),
    ];
    lanes
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(sink, _)| WatchedSubscription {
            pipeline: pipeline.name.clone(),
            sink,
            source: pipeline.source.clone(),
            subscription: format!("{}-{sink}", pipeline.source.subscription.value),
        })
        .collect()
}

async fn build_lanes(
    service: &ServiceConfig,
    pipeline: &PipelineConfig,
    root: &Path,
    pulsar: &Pulsar<TokioExecutor>,
    http: &reqwest::Client,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
    cancel: &CancellationToken,
) -> Result<Vec<Lane>, RuntimeError> {
    let setup = |message: String| RuntimeError::Setup {
        pipeline: pipeline.name.clone(),
        message,
    };
    let rows = pipeline.row_layout();
    let source = &pipeline.source;
    let spec = pipeline.decoder_spec();
    let registry = SchemaRegistry::new(http.clone(), &service.pulsar.admin_url);
    let template =
        PayloadDecoder::new(spec, registry).map_err(|e| setup(format!("reader schema: {e}")))?;
    let mut checked = Vec::new();
    for topic in source.named_topics() {
        let mut decoder = template.for_topic(schema_topic(&topic));
        refuse_incompatible_topic(&mut decoder)
            .await
            .map_err(|e| setup(format!("{topic}: {e}")))?;
        checked.push(decoder);
    }
    let template = TopicDecoders::new(template, checked);
    let mut lanes = Vec::new();
    let mut dead_letter_owner_taken = false;
    let lane = |sink: Box<dyn Sink>,
                subscription: PulsarSource,
                dead_letter_owner: bool|
     -> Result<Lane, RuntimeError> {
        Ok(Lane {
            pipeline: pipeline.name.clone(),
            source: Box::new(subscription),
            decoder: template.clone(),
            sinks: vec![sink],
            dead_letter: dead_letter_owner.then(|| {
                DeadLetter::new(
                    pulsar.clone(),
                    source.dead_letter_topic(),
                    &pipeline.name,
                    cancel.clone(),
                )
            }),
            max_batch: source.max_batch_messages,
            linger: source.max_batch_wait,
            cancel: cancel.clone(),
            metrics: metrics.clone(),
            health: health.clone(),
        })
    };

    if let Some(online) = &pipeline.online {
        let sink = RedisSink::connect(
            &service.redis,
            online,
            &pipeline.name,
            rows.clone(),
            cancel.clone(),
        )
        .await
        .map_err(|e| setup(e.to_string()))?;
        let subscription = PulsarSource::subscribe(
            pulsar.clone(),
            source,
            format!("{}-online", source.subscription.value),
            source.subscription_type,
            AckMode::Individual,
            cancel.clone(),
        )
        .await?;
        lanes.push(lane(Box::new(sink), subscription, true)?);
        dead_letter_owner_taken = true;
    }
    if let Some(offline) = &pipeline.offline {
        let url = offline
            .url
            .as_ref()
            .map_or(service.offline.default_url.as_str(), |u| u.value.as_str());
        let store = OfflineStore::open(url, root, &service.offline.options)
            .map_err(|e| setup(e.to_string()))?
            .counted(metrics, &pipeline.name);
        let spec = TableSpec::new(
            &store,
            &pipeline.name,
            &template.output_schema(),
            &pipeline.event_time,
            offline,
        )
        .map_err(|e| setup(format!("offline table: {e}")))?;
        let table = open_table_at_start(&spec).await.map_err(setup)?;
        health.add_probe(Arc::new(ObjectStoreProbe {
            pipeline: pipeline.name.clone(),
            store: spec.location.store.clone(),
        }));
        let mut sink = DeltaSink::new(spec, offline.clone(), table, cancel.clone());
        sink.set_schema_fingerprint(pipeline.schema.fingerprint());
        sink.set_metrics(metrics.clone());
        // Cumulative acknowledgement needs a single active consumer per topic partition.
        let kind = match source.subscription_type {
            SubscriptionKind::Exclusive => SubscriptionKind::Exclusive,
            _ => SubscriptionKind::Failover,
        };
        let subscription = PulsarSource::subscribe(
            pulsar.clone(),
            source,
            format!("{}-offline", source.subscription.value),
            kind,
            AckMode::Cumulative,
            cancel.clone(),
        )
        .await?;
        lanes.push(lane(
            Box::new(sink),
            subscription,
            !dead_letter_owner_taken,
        )?);
    }
    Ok(lanes)
}

/// Opens (or creates, or evolves) the offline table before any lane runs, so that a table that
/// cannot take the pipeline schema stops the process with nothing written. A store that does
/// not answer is not fatal: the lane opens the table itself, retrying.
async fn open_table_at_start(
    spec: &TableSpec,
) -> Result<Option<crate::sink::delta::OfflineTable>, String> {
    match spec.open().await {
        Ok((table, opened)) => {
            tracing::info!(table = %table.url(), version = table.version(), ?opened, "offline table ready");
            Ok(Some(table))
        }
        Err(TableError::Refused(why)) => Err(format!("offline table: refusing to start: {why}")),
        Err(e) => {
            tracing::warn!(error = %e, "offline table not readable yet; its lane keeps trying");
            Ok(None)
        }
    }
}

/// Start-up check: the topic's latest writer version (every version, for a transitive
/// strategy) must be compatible with the pipeline schema, unless the strategy checks nothing.
async fn refuse_incompatible_topic(decoder: &mut PayloadDecoder) -> Result<(), String> {
    let verdicts = decoder
        .check_registered_versions()
        .await
        .map_err(|e| format!("cannot read the topic's registered schemas: {e}"))?;
    let strategy = decoder.compatibility();
    let considered: Vec<&(i64, Result<(), String>)> = if strategy.transitive() {
        verdicts.iter().collect()
    } else {
        verdicts.last().into_iter().collect()
    };
    let refused: Vec<&str> = considered
        .iter()
        .filter_map(|(_, verdict)| verdict.as_ref().err().map(String::as_str))
        .collect();
    if strategy.checks() && !refused.is_empty() {
        return Err(format!("refusing to start: {}", refused.join("; ")));
    }
    for (version, verdict) in &verdicts {
        if let Err(reason) = verdict {
            tracing::warn!(version, %reason, "registered writer version is incompatible; its messages will go to the dead-letter topic");
        }
    }
    Ok(())
}
