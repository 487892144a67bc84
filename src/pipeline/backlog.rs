//! Subscription backlogs from the broker's topic stats, exported as a gauge per lane: the
//! number an operator alerts on ("the online store is N messages behind").

use std::sync::Arc;
use std::time::Duration;

use pulsar::{Pulsar, TokioExecutor};
use tokio_util::sync::CancellationToken;

use crate::metrics::{LaneLabels, Metrics};
use crate::pulsar::{resolve_partitions, PulsarAdmin, PulsarSourceConfig};

/// One lane's subscription to watch.
#[derive(Debug, Clone)]
pub struct WatchedSubscription {
    /// Pipeline name.
    pub pipeline: String,
    /// The lane's name (its sinks' kinds).
    pub sink: String,
    /// The pipeline's source (topics or pattern).
    pub source: PulsarSourceConfig,
    /// Subscription name.
    pub subscription: String,
}

/// How often the stats are read.
pub const BACKLOG_POLL: Duration = Duration::from_secs(10);

/// Polls until `cancel` fires; a broker that does not answer leaves the last value.
pub async fn watch_backlogs(
    pulsar: Pulsar<TokioExecutor>,
    admin: PulsarAdmin,
    watched: Vec<WatchedSubscription>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    loop {
        for lane in &watched {
            match backlog_of(&pulsar, &admin, lane).await {
                Ok(backlog) => {
                    metrics
                        .subscription_backlog_messages
                        .get_or_create(&LaneLabels {
                            pipeline: lane.pipeline.clone(),
                            sink: lane.sink.clone(),
                        })
                        .set(backlog);
                }
                Err(e) => {
                    tracing::debug!(pipeline = %lane.pipeline, subscription = %lane.subscription, error = %e, "cannot read the subscription backlog")
                }
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(BACKLOG_POLL) => {}
        }
    }
}

/// Sum of the subscription's backlog over every partition the source consumes.
async fn backlog_of(
    pulsar: &Pulsar<TokioExecutor>,
    admin: &PulsarAdmin,
    lane: &WatchedSubscription,
) -> Result<i64, String> {
    let partitions = resolve_partitions(pulsar, &lane.source)
        .await
        .map_err(|e| e.to_string())?;
    let mut total = 0;
    for partition in partitions {
        let stats = admin
            .topic_stats(&partition)
            .await
            .map_err(|e| e.to_string())?;
        total += stats["subscriptions"][&lane.subscription]["msgBacklog"]
            .as_i64()
            .unwrap_or(0);
    }
    Ok(total)
}
