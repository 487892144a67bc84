//! Each sink of a lane runs in a task of its own, fed through a bounded queue: a sink that
//! takes long over one call (the offline sink encoding and committing a rollover) does not
//! hold up the lane's other sinks (Redis keeps getting fresh values), and decoding the next
//! batch overlaps the sinks' work. A full queue stops the lane: that is the backpressure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::Array;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::metrics::{LaneLabels, Metrics};
use crate::record::{event_time_millis, RowBatch};
use crate::sink::{Sink, SinkError};
use crate::source::MessagePosition;

/// Rows a sink's queue holds before the lane waits for it: enough to ride out a rollover
/// commit (64-512 ms in the benchmark's burst) at full speed without stopping the other
/// sinks. Counted in rows, not batches: when messages trickle in, batches are small, and a
/// queue of a few dozen of them filled within one commit and held Redis up behind it.
pub const SINK_QUEUE_ROWS: usize = 64_000;

/// Batches a sink's queue holds at most, however small: bounds the per-batch overhead a
/// queue of one-message batches would carry.
const SINK_QUEUE_BATCHES: usize = 1_024;

/// Rows a batch counts against a sink's queue: its rows, at least one (a batch of dead
/// letters only still waits its turn), at most the whole queue (a batch larger than the
/// queue waits for it to empty instead of forever).
fn queue_permits(batch: &RowBatch) -> u32 {
    let rows = batch.rows.num_rows().clamp(1, SINK_QUEUE_ROWS);
    u32::try_from(rows).unwrap_or(u32::MAX)
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

/// A batch in a sink's queue, holding its share of the queue's rows until the task takes it.
pub struct Queued {
    batch: RowBatch,
    rows: OwnedSemaphorePermit,
}

/// The lane's end of a sink's queue.
#[derive(Clone)]
pub struct SinkQueue {
    batches: mpsc::Sender<Queued>,
    rows: Arc<Semaphore>,
}

/// The sink task is gone (it reported why before it ended).
#[derive(Debug)]
pub struct SinkGone;

impl SinkQueue {
    /// Queues `batch`, waiting while the queue holds [`SINK_QUEUE_ROWS`] rows (or
    /// [`SINK_QUEUE_BATCHES`] batches). Cancel-safe: a send dropped while waiting queues
    /// nothing.
    pub async fn send(&self, batch: RowBatch) -> Result<(), SinkGone> {
        let rows = Arc::clone(&self.rows)
            .acquire_many_owned(queue_permits(&batch))
            .await
            .map_err(|_| SinkGone)?;
        self.batches
            .send(Queued { batch, rows })
            .await
            .map_err(|_| SinkGone)
    }
}

/// A running sink: the queue that feeds it and the task that hands the sink back.
pub struct SinkHandle {
    /// Where the lane sends batches; dropping it makes the task flush and end.
    pub batches: SinkQueue,
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

/// Starts the task of one sink, behind a queue of [`SINK_QUEUE_ROWS`] rows.
pub fn spawn(sink: Box<dyn Sink>, context: SinkTaskContext) -> SinkHandle {
    let (batches, receiver) = mpsc::channel(SINK_QUEUE_BATCHES);
    let rows = Arc::new(Semaphore::new(SINK_QUEUE_ROWS));
    let task = tokio::spawn(run(sink, receiver, context));
    SinkHandle {
        batches: SinkQueue { batches, rows },
        task,
    }
}

async fn run(
    mut sink: Box<dyn Sink>,
    mut batches: mpsc::Receiver<Queued>,
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
                Some(Queued { batch, rows }) => {
                    // Taken off the queue: the lane may queue the next rows meanwhile.
                    drop(rows);
                    match merge_queued(batch, &mut batches, sink.merge_queued_rows()) {
                        Ok(batch) => write(sink.as_mut(), batch, &context).await,
                        Err(e) => Err(SinkError::fatal_from("merging queued batches", e)),
                    }
                }
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

/// `first` and the batches waiting behind it, up to `limit` rows (overshooting by at most
/// one batch), as one batch.
fn merge_queued(
    first: RowBatch,
    queue: &mut mpsc::Receiver<Queued>,
    limit: usize,
) -> Result<RowBatch, arrow::error::ArrowError> {
    let mut rows = first.rows.num_rows();
    let mut rest = Vec::new();
    while rows < limit {
        match queue.try_recv() {
            Ok(Queued { batch, rows: taken }) => {
                drop(taken);
                rows += batch.rows.num_rows();
                rest.push(batch);
            }
            Err(_) => break,
        }
    }
    if rest.is_empty() {
        return Ok(first);
    }
    first.append(rest)
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
            if let Some(&newest) = event_times.iter().max() {
                metrics
                    .consistency
                    .online_acknowledged(&context.labels.pipeline, newest);
            }
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
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};

    use super::*;

    /// Messages `first..first + n`, every other one with a row (the rest dead-lettered).
    fn batch(first: u64, n: u64) -> RowBatch {
        let with_rows: Vec<u64> = (first..first + n).filter(|m| m % 2 == 0).collect();
        let rows = RecordBatch::try_from_iter(vec![(
            "message",
            Arc::new(Int64Array::from_iter_values(
                with_rows.iter().map(|&m| m as i64),
            )) as _,
        )])
        .unwrap();
        RowBatch {
            rows,
            positions: (first..first + n)
                .map(|m| MessagePosition {
                    topic: "t".into(),
                    offset: (1, m, -1),
                    entry_size: None,
                    origin: None,
                })
                .collect(),
            row_positions: with_rows.iter().map(|&m| (m - first) as usize).collect(),
            publish_times_ms: (first..first + n).collect(),
        }
    }

    /// A sink queue as [`spawn`] makes it, with the task's end of it.
    fn queue(batches: usize) -> (SinkQueue, mpsc::Receiver<Queued>) {
        let (sender, receiver) = mpsc::channel(batches);
        let rows = Arc::new(Semaphore::new(SINK_QUEUE_ROWS));
        (
            SinkQueue {
                batches: sender,
                rows,
            },
            receiver,
        )
    }

    async fn queues_now(queue: &SinkQueue, batch: RowBatch) -> bool {
        tokio::time::timeout(Duration::from_millis(50), queue.send(batch))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn queued_batches_merge_up_to_the_limit_with_rows_pointing_at_their_messages() {
        let (sender, mut queue) = queue(8);
        for first in [4, 8, 12] {
            sender.send(batch(first, 4)).await.unwrap();
        }
        let merged = merge_queued(batch(0, 4), &mut queue, 5).unwrap();
        // 2 rows + 2 + 2: the limit of 5 is passed by the third batch, which is the last.
        assert_eq!(merged.rows.num_rows(), 6);
        assert_eq!(merged.positions.len(), 12);
        assert_eq!(merged.publish_times_ms, (0..12).collect::<Vec<u64>>());
        let values = merged
            .rows
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for (row, &message) in merged.row_positions.iter().enumerate() {
            assert_eq!(values.value(row) as u64, merged.positions[message].offset.1);
        }
        assert_eq!(
            queue.recv().await.unwrap().batch.positions[0].offset.1,
            12,
            "left queued"
        );
    }

    #[tokio::test]
    async fn a_sink_that_does_not_merge_gets_one_batch_at_a_time() {
        let (sender, mut queue) = queue(8);
        sender.send(batch(4, 4)).await.unwrap();
        let one = merge_queued(batch(0, 4), &mut queue, 0).unwrap();
        assert_eq!(one.positions.len(), 4);
        let next = queue.recv().await.unwrap().batch;
        let alone = merge_queued(next, &mut queue, 100).unwrap();
        assert_eq!(alone.positions.len(), 4, "nothing else waiting");
    }

    #[tokio::test]
    async fn a_sink_queue_is_full_at_its_rows_whatever_the_batch_size() {
        let (sender, mut receiver) = queue(SINK_QUEUE_BATCHES);
        // Batches of 100 rows: 640 of them, far more than a count of batches let in before.
        let per_batch = 200;
        let batches = 2 * SINK_QUEUE_ROWS as u64 / per_batch;
        for first in (0..batches).map(|b| b * per_batch) {
            assert!(
                queues_now(&sender, batch(first, per_batch)).await,
                "batch at {first}"
            );
        }
        let first_beyond = batches * per_batch;
        assert!(
            !queues_now(&sender, batch(first_beyond, per_batch)).await,
            "full at {SINK_QUEUE_ROWS} rows"
        );
        drop(receiver.recv().await.unwrap());
        assert!(
            queues_now(&sender, batch(first_beyond, per_batch)).await,
            "room again once the task took a batch"
        );
    }

    #[test]
    fn a_batch_counts_its_rows_at_least_one_at_most_the_queue() {
        assert_eq!(queue_permits(&batch(0, 8)), 4);
        assert_eq!(queue_permits(&batch(1, 1)), 1, "dead letters only");
        let huge = batch(0, 2 * SINK_QUEUE_ROWS as u64 + 2);
        assert_eq!(queue_permits(&huge), SINK_QUEUE_ROWS as u32);
    }
}
