//! The runtime: turns checked pipeline configs into lanes and runs them until shutdown.
//!
//! A pipeline's sinks share one lane and one durable subscription (`delivery: shared`, the
//! default: each event is delivered and decoded once), or each sink gets its own lane and
//! subscription (`delivery: per_sink`: each acknowledges at its own pace and one sink being
//! down never stalls the other). See docs/delivery.md.

mod ack_gate;
mod backfill;
mod backlog;
mod dead_letter;
mod dead_letter_log;
mod lane;
mod sink_task;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

use pulsar::{Pulsar, TokioExecutor};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use backfill::{backfill, BackfillRange, BackfillSummary};
pub use backlog::{watch_backlogs, WatchedSubscription};
pub use dead_letter::{DeadLetter, DeadLetterTarget};
pub use lane::{Lane, LaneError};

use crate::config::{PipelineConfig, ServiceConfig};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::pulsar::SchemaRegistry;
use crate::pulsar::{
    CredentialError, Delivery, PulsarAdmin, PulsarError, PulsarSkippedEntries, PulsarSource,
    SubscriptionKind,
};
use crate::schema::{schema_topic, PayloadDecoder, TopicDecoders};
use crate::sink::{Sink, SinkBuilder, SinkContext};
use crate::source::{AckMode, OfflineOrigins, SkippedEntries, SourceError};

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
    /// The Pulsar credentials or CA cannot be used.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
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

impl From<PulsarError> for RuntimeError {
    fn from(e: PulsarError) -> Self {
        RuntimeError::Source(Box::new(e.into()))
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
    let admin = service.pulsar.admin()?;
    let pulsar = PulsarSource::connect(&service.pulsar).await?;
    let mut lanes = Vec::new();
    let mut watched = Vec::new();
    for pipeline in pipelines {
        let context = LaneContext {
            service,
            root,
            pulsar: &pulsar,
            admin: &admin,
            metrics: &metrics,
            health: &health,
            cancel: &cancel,
        };
        for (lane, subscription) in build_lanes(&context, pipeline).await? {
            watched.push(WatchedSubscription {
                pipeline: pipeline.name.clone(),
                sink: lane.name(),
                source: pipeline.source.clone(),
                subscription,
            });
            lanes.push(lane);
        }
    }
    health.expect_lanes(lanes.len());
    let backlogs = tokio::spawn(watch_backlogs(
        pulsar.clone(),
        admin.clone(),
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

/// What every lane of the process shares.
struct LaneContext<'a> {
    service: &'a ServiceConfig,
    root: &'a Path,
    pulsar: &'a Pulsar<TokioExecutor>,
    admin: &'a PulsarAdmin,
    metrics: &'a Arc<Metrics>,
    health: &'a Arc<Health>,
    cancel: &'a CancellationToken,
}

/// The lanes of a pipeline (its sinks, grouped by `delivery`), each with its durable
/// subscription.
async fn build_lanes(
    context: &LaneContext<'_>,
    pipeline: &PipelineConfig,
) -> Result<Vec<(Lane, String)>, RuntimeError> {
    let setup = |message: String| RuntimeError::Setup {
        pipeline: pipeline.name.clone(),
        message,
    };
    let source = &pipeline.source;
    let spec = pipeline.decoder_spec();
    let registry = SchemaRegistry::new(context.admin.clone());
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
    let decoders = TopicDecoders::new(template, checked);
    let sink_context = SinkContext {
        pipeline: pipeline.name.clone(),
        rows: pipeline.row_layout(),
        output_schema: decoders.output_schema(),
        schema_fingerprint: pipeline.schema.fingerprint(),
        root: context.root.to_path_buf(),
        metrics: context.metrics.clone(),
        health: context.health.clone(),
        cancel: context.cancel.clone(),
        offline_origins: offline_origins(context.service),
        tie_break: context.service.pulsar.replication.is_some(),
    };
    let builders = pipeline.sink_builders(context.service);
    let mut sinks = Vec::new();
    for builder in &builders {
        let sink = builder
            .build(&sink_context)
            .await
            .map_err(|e| setup(format!("{} sink: {e}", builder.kind())))?;
        sinks.push(Some(sink));
    }
    let mut lanes = Vec::new();
    for plan in plan_lanes(pipeline, &builders) {
        let mut sinks: Vec<Box<dyn Sink>> = plan
            .sinks
            .iter()
            .filter_map(|&index| sinks.get_mut(index).and_then(Option::take))
            .collect();
        let LanePlan {
            subscription,
            kind,
            acknowledgement,
            ..
        } = plan;
        // What the broker skips it acknowledges in this lane's cursor (see
        // pulsar::skipped): the sinks ask it before waiting on a gap.
        let skipped: Arc<dyn SkippedEntries> = Arc::new(PulsarSkippedEntries::new(
            context.admin.clone(),
            subscription.clone(),
        ));
        for sink in &mut sinks {
            sink.set_skipped_entries(skipped.clone());
        }
        let subscription_source = PulsarSource::subscribe(
            context.pulsar.clone(),
            source,
            subscription.clone(),
            (kind, acknowledgement),
            context.service.pulsar.replication.as_ref(),
            context.cancel.clone(),
        )
        .await?;
        // The first lane publishes the pipeline's dead letters; the others only skip them.
        let dead_letter = lanes.is_empty().then(|| {
            DeadLetter::new(
                context.pulsar.clone(),
                context.admin.clone(),
                DeadLetterTarget::of(source),
                &pipeline.name,
                context.cancel.clone(),
            )
        });
        let lane = Lane {
            pipeline: pipeline.name.clone(),
            source: Box::new(subscription_source),
            decoder: decoders.clone(),
            sinks,
            dead_letter,
            max_batch: source.max_batch_messages,
            linger: source.max_batch_wait,
            cancel: context.cancel.clone(),
            metrics: context.metrics.clone(),
            health: context.health.clone(),
        };
        lanes.push((lane, subscription));
    }
    Ok(lanes)
}

/// Which messages' rows the offline table takes: every one, unless the namespace is
/// replicated and this sidecar commits only its own region's (see `pulsar.replication`).
pub(crate) fn offline_origins(service: &ServiceConfig) -> OfflineOrigins {
    service
        .pulsar
        .replication
        .as_ref()
        .map_or(OfflineOrigins::AllRegions, |r| r.offline)
}

/// One lane of a pipeline as its config makes it: which sinks it feeds and how it
/// subscribes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanePlan {
    /// Indexes into the pipeline's sink builders.
    pub sinks: Vec<usize>,
    /// Durable subscription name.
    pub subscription: String,
    /// Subscription type (cumulative acknowledgement needs one active consumer per
    /// partition).
    pub kind: SubscriptionKind,
    /// How the lane acknowledges: cumulatively when any of its sinks needs it.
    pub acknowledgement: AckMode,
}

/// The lanes of `pipeline` over its sink `builders`: one lane on `<subscription>` for
/// `delivery: shared`, one lane per sink on `<subscription>-<sink>` for `per_sink`.
pub fn plan_lanes(pipeline: &PipelineConfig, builders: &[Box<dyn SinkBuilder>]) -> Vec<LanePlan> {
    let source = &pipeline.source;
    let name = &source.subscription.value;
    let lane = |sinks: Vec<usize>, subscription: String| {
        let cumulative = sinks
            .iter()
            .any(|&i| builders[i].acknowledgement() == AckMode::Cumulative);
        let acknowledgement = if cumulative {
            AckMode::Cumulative
        } else {
            AckMode::Individual
        };
        LanePlan {
            sinks,
            subscription,
            kind: source
                .subscription_type
                .for_acknowledgement(acknowledgement),
            acknowledgement,
        }
    };
    match source.delivery {
        Delivery::Shared => vec![lane((0..builders.len()).collect(), name.clone())],
        Delivery::PerSink => builders
            .iter()
            .enumerate()
            .map(|(i, builder)| lane(vec![i], format!("{name}-{}", builder.kind())))
            .collect(),
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
