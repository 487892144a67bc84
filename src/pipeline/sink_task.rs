//! Each sink of a lane runs in a task of its own, fed through a bounded channel: a sink that
//! takes long over one call (the offline sink encoding and committing a rollover) does not
//! hold up the lane's other sinks (Redis keeps getting fresh values), and decoding the next
//! batch overlaps the sinks' work. A full channel stops the lane: that is the backpressure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::Array;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::metrics::{LaneLabels, Metrics};
use crate::record::{event_time_millis, RowBatch};
use crate::sink::{Sink, SinkError};
use crate::source::MessagePosition;

/// Rows a sink task may hold before the lane waits for it: enough to ride out a rollover
/// commit at full speed without stopping the other sinks. Counted in rows, so that larger
/// batches do not make the queue's memory larger.
pub const SINK_QUEUE_ROWS: usize = 64_000;

/// The queue of a sink task, in batches of at most `max_batch` messages: about
/// [`SINK_QUEUE_ROWS`] rows, and never fewer than two batches (one being written, one
/// waiting) nor more than 64.
pub fn queue_batches(max_batch: usize) -> usize {
    (SINK_QUEUE_ROWS / max_batch.max(1)).clamp(2, 64)
}

/// How often a sink is given a tick (time-based work such as a rollover): often enough
/// that the offline sink's `idle_commit` (200 ms by default) is noticed within a quarter.
const TICK: Duration = Duration::from_millis(50);

/// What a sink task tells its lane.
#[derive(Debug)]
pub enum SinkReport {
    /// The sink has these messages durable.
    Durable(Vec<MessagePosition>),
    /// Sink `index` cannot go on.
    Failed(usize, SinkError),
    /// The sink stopped on shutdown before it had everything durable.
    Cancelled(String),
    /// The sink flushed and ended.
    Ended,
}

/// A running sink: the channel that feeds it and the task that hands the sink back.
pub struct SinkHandle {
    /// Where the lane sends batches; dropping it makes the task flush and end.
    pub batches: mpsc::Sender<RowBatch>,
    /// The task; returns the sink.
    pub task: JoinHandle<Box<dyn Sink>>,
}

/// What a sink task needs besides its sink.
pub struct SinkTaskContext {
    /// Position of the sink in the lane (names it in reports).
    pub index: usize,
    /// Metric labels of the sink.
    pub labels: LaneLabels,
    /// Where counts go.
    pub metrics: Arc<Metrics>,
    /// Event-time column, for the freshness of sinks that report it.
    pub event_time: String,
    /// Where reports go (unbounded: a report is small and the lane drains them after every
    /// batch, so a sink never waits on its lane).
    pub reports: mpsc::UnboundedSender<SinkReport>,
}

/// Starts the task of one sink, behind a queue of `queue_batches` batches.
pub fn spawn(sink: Box<dyn Sink>, queue_batches: usize, context: SinkTaskContext) -> SinkHandle {
    let (batches, receiver) = mpsc::channel(queue_batches);
    let task = tokio::spawn(run(sink, receiver, context));
    SinkHandle { batches, task }
}

async fn run(
    mut sink: Box<dyn Sink>,
    mut batches: mpsc::Receiver<RowBatch>,
    context: SinkTaskContext,
) -> Box<dyn Sink> {
    let index = context.index;
    let report = |report: SinkReport| {
        // The lane is gone only when it stopped on an error; nothing is left to tell it.
        let _ = context.reports.send(report);
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let outcome = tokio::select! {
            batch = batches.recv() => match batch {
                Some(batch) => write(sink.as_mut(), batch, &context).await,
                None => break,
            },
            _ = tick.tick() => sink.tick().await,
        };
        match outcome {
            Ok(durable) if durable.is_empty() => {}
            Ok(durable) => report(SinkReport::Durable(durable)),
            Err(SinkError::Cancelled(why)) => {
                report(SinkReport::Cancelled(why));
                return sink;
            }
            Err(e) => {
                report(SinkReport::Failed(index, e));
                return sink;
            }
        }
    }
    match sink.flush().await {
        Ok(durable) => {
            if !durable.is_empty() {
                report(SinkReport::Durable(durable));
            }
            report(SinkReport::Ended);
        }
        Err(SinkError::Cancelled(why)) => report(SinkReport::Cancelled(why)),
        Err(e) => report(SinkReport::Failed(index, e)),
    }
    sink
}

/// One `write` with its metrics.
async fn write(
    sink: &mut dyn Sink,
    batch: RowBatch,
    context: &SinkTaskContext,
) -> Result<Vec<MessagePosition>, SinkError> {
    let fresh = sink.reports_freshness();
    let (publish_times, event_times) = if fresh {
        (
            batch.publish_times_ms.clone(),
            event_times(&batch, &context.event_time),
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let rows = batch.rows.num_rows() as u64;
    let started = Instant::now();
    let written = sink.write(batch).await;
    let metrics = &context.metrics;
    metrics
        .sink_write_seconds
        .get_or_create(&context.labels)
        .observe(started.elapsed().as_secs_f64());
    if written.is_ok() {
        if fresh {
            observe_freshness(metrics, &context.labels, &publish_times, &event_times);
        }
        metrics
            .rows_written
            .get_or_create(&context.labels)
            .inc_by(rows);
    }
    written
}

fn event_times(batch: &RowBatch, column: &str) -> Vec<i64> {
    batch
        .rows
        .column_by_name(column)
        .map(|column| {
            (0..column.len())
                .filter_map(|row| event_time_millis(column, row))
                .collect()
        })
        .unwrap_or_default()
}

/// Values are readable once the sink's write returns: record how old they were then.
fn observe_freshness(
    metrics: &Metrics,
    labels: &LaneLabels,
    publish_times: &[u64],
    event_times: &[i64],
) {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let by_publish = metrics.freshness_publish_time_seconds.get_or_create(labels);
    for &published in publish_times {
        let age = now_ms - i64::try_from(published).unwrap_or(i64::MAX);
        by_publish.observe(age.max(0) as f64 / 1000.0);
    }
    let by_event = metrics.freshness_event_time_seconds.get_or_create(labels);
    for &event in event_times {
        by_event.observe((now_ms - event).max(0) as f64 / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::queue_batches;

    #[test]
    fn a_sink_queue_holds_about_the_same_rows_whatever_the_batch_size() {
        assert_eq!(queue_batches(1_000), 64);
        assert_eq!(queue_batches(4_000), 16);
        assert_eq!(queue_batches(100), 64, "at most 64 batches");
        assert_eq!(
            queue_batches(100_000),
            2,
            "at least one written, one waiting"
        );
        assert_eq!(
            queue_batches(0),
            64,
            "0 is refused by validation; no division by it"
        );
    }
}
