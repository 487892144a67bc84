//! The feature log's writer task: gathers offered rows per view, and commits a view's rows
//! as one Delta version once `rollover_rows` wait or the oldest waited `rollover_interval`.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use parquet::file::properties::WriterProperties;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::rows::{self, LOG_DATE};
use super::{LoggedRequest, Shared, WriterSettings};
use crate::delta::writer::{RolloverError, RolloverLimits, RolloverRows, RolloverWriter};
use crate::delta::{defaults, parquet_properties, CommitError, Compression, Table, TableError};
use crate::retry::Backoff;

/// How long the writer keeps taking rows after shutdown began, for answers still being
/// written (the serving listener drains its requests within 5 s).
const CLOSING_GRACE: Duration = Duration::from_secs(10);
/// How often the writer takes the rows offered since its last look.
const DRAIN_EVERY: Duration = Duration::from_millis(100);
/// Commits that lose the race to another writer are tried again at once this many times
/// before backing off.
const CONFLICT_RETRIES: u32 = 10;

/// Why a rollover did not land (retried until shutdown).
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("{0}")]
    Table(#[from] TableError),
    #[error("{0}")]
    Rollover(#[from] RolloverError),
    #[error("building the log's rows: {0}")]
    Rows(String),
}

/// A view's rows waiting for their commit.
#[derive(Default)]
struct Pending {
    requests: Vec<LoggedRequest>,
    rows: usize,
    since: Option<Instant>,
}

/// The task's state.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    settings: WriterSettings,
    cancel: CancellationToken,
    pending: Vec<Pending>,
    tables: Vec<Option<Table>>,
    /// Per view, its table's rollover writer.
    writers: Vec<RolloverWriter>,
    /// Numbers each batch, so that a rollover writer reuses files only for their own batch.
    batches: u64,
    properties: WriterProperties,
}

impl Writer {
    pub(crate) fn new(
        shared: Arc<Shared>,
        settings: WriterSettings,
        cancel: CancellationToken,
    ) -> Self {
        let views = shared.views.len();
        let metadata = vec![(
            "feature_connector.feature_log".to_string(),
            "served rows".to_string(),
        )];
        let properties = parquet_properties(
            Compression::Zstd,
            defaults::ZSTD_LEVEL,
            defaults::ROW_GROUP_ROWS,
            metadata,
        )
        .unwrap_or_default();
        Self {
            shared,
            settings,
            cancel,
            pending: (0..views).map(|_| Pending::default()).collect(),
            tables: (0..views).map(|_| None).collect(),
            writers: (0..views).map(|_| RolloverWriter::default()).collect(),
            batches: 0,
            properties,
        }
    }

    /// Takes rows until every handle is gone (or `CLOSING_GRACE` after shutdown began),
    /// committing on the way, then commits what it holds.
    pub(crate) async fn run(mut self, mut receiver: mpsc::UnboundedReceiver<LoggedRequest>) {
        for view in 0..self.tables.len() {
            if let Err(e) = self.table(view).await {
                tracing::warn!(error = %e, view = %self.shared.views[view].view.name, "feature log table not ready; trying again at its first commit");
            }
        }
        let mut closing: Option<Instant> = None;
        let mut drain = tokio::time::interval(DRAIN_EVERY);
        drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let limits = self.limits();
            let due = self
                .pending
                .iter()
                .filter_map(|p| limits.due_at(p.since.map(Instant::into_std)))
                .min()
                .map(Instant::from_std);
            tokio::select! {
                _ = drain.tick() => {
                    // Taken in batches rather than awaited one by one: a sender then never
                    // wakes this task (a thread of another runtime) for each answer.
                    let mut ended = false;
                    loop {
                        match receiver.try_recv() {
                            Ok(request) => {
                                let view = request.view;
                                self.push(request);
                                if self.due(view, Instant::now()) {
                                    self.commit(view).await;
                                }
                            }
                            Err(mpsc::error::TryRecvError::Empty) => break,
                            Err(mpsc::error::TryRecvError::Disconnected) => {
                                ended = true;
                                break;
                            }
                        }
                    }
                    if ended {
                        break;
                    }
                }
                () = sleep_until(due) => {
                    let now = Instant::now();
                    for view in 0..self.pending.len() {
                        if self.due(view, now) {
                            self.commit(view).await;
                        }
                    }
                }
                () = self.cancel.cancelled(), if closing.is_none() => {
                    closing = Some(Instant::now() + CLOSING_GRACE);
                }
                () = sleep_until(closing) => break,
            }
        }
        receiver.close();
        while let Ok(request) = receiver.try_recv() {
            self.push(request);
        }
        for view in 0..self.pending.len() {
            self.commit(view).await;
        }
        for table in self.tables.iter_mut().flatten() {
            table.finish_checkpoint(Duration::from_secs(5)).await;
        }
        tracing::info!("feature log stopped");
    }

    fn limits(&self) -> RolloverLimits {
        RolloverLimits {
            rows: self.settings.rollover_rows,
            interval: self.settings.rollover_interval,
        }
    }

    /// Whether the rows of `view` that wait are due for their commit at `now`.
    fn due(&self, view: usize, now: Instant) -> bool {
        self.pending.get(view).is_some_and(|pending| {
            self.limits().due(
                pending.rows,
                pending.since.map(Instant::into_std),
                now.into_std(),
            )
        })
    }

    fn push(&mut self, request: LoggedRequest) {
        let Some(pending) = self.pending.get_mut(request.view) else {
            self.shared.release(request.rows.len());
            return;
        };
        pending.rows += request.rows.len();
        pending.since.get_or_insert_with(Instant::now);
        pending.requests.push(request);
    }

    /// Commits the rows of `view` that wait, retrying until it lands or shutdown; counts
    /// them logged, or dropped when it gave up.
    async fn commit(&mut self, view: usize) {
        let pending = std::mem::take(&mut self.pending[view]);
        if pending.rows == 0 {
            return;
        }
        let rows = pending.rows;
        let log_view = &self.shared.views[view];
        let name = log_view.view.name.clone();
        let result = match self.batch(view, pending.requests).await {
            Ok(batch) => self.write(view, batch).await,
            Err(e) => Err(e),
        };
        let log_view = &self.shared.views[view];
        match result {
            Ok(version) => {
                log_view.logged.inc_by(rows as u64);
                tracing::debug!(view = %name, rows, version, "served rows logged");
            }
            Err(e) => {
                log_view.dropped.inc_by(rows as u64);
                tracing::warn!(view = %name, rows, error = %e, "served rows not logged (shutdown while the log's store failed)");
            }
        }
        self.shared.release(rows);
    }

    /// The rows as one Arrow batch, built off the runtime.
    async fn batch(
        &self,
        view: usize,
        requests: Vec<LoggedRequest>,
    ) -> Result<RecordBatch, WriteError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let log_view = &shared.views[view];
            rows::to_batch(&log_view.view, &log_view.schema, &requests)
        })
        .await
        .map_err(|e| WriteError::Rows(e.to_string()))?
        .map_err(|e| WriteError::Rows(e.to_string()))
    }

    /// Writes the batch's files once and commits them, retrying with backoff; gives up only
    /// at shutdown (after one attempt past it). Returns the table version.
    async fn write(&mut self, view: usize, batch: RecordBatch) -> Result<u64, WriteError> {
        let mut backoff = Backoff::default();
        let mut conflicts = 0;
        self.batches += 1;
        let batch_id = self.batches;
        loop {
            match self.attempt(view, &batch, batch_id).await {
                Ok(version) => return Ok(version),
                Err(WriteError::Rollover(RolloverError::Commit(CommitError::Conflict(_))))
                    if conflicts < CONFLICT_RETRIES =>
                {
                    conflicts += 1;
                }
                Err(e) => {
                    conflicts = 0;
                    if backoff
                        .wait(&self.cancel, "feature log commit failed", &e)
                        .await
                        .is_err()
                    {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// One attempt: the batch's files (written at its first attempt only) committed as the
    /// next version.
    async fn attempt(
        &mut self,
        view: usize,
        batch: &RecordBatch,
        batch_id: u64,
    ) -> Result<u64, WriteError> {
        let properties = self.properties.clone();
        self.table(view).await?;
        let (Some(Some(table)), Some(writer)) =
            (self.tables.get_mut(view), self.writers.get_mut(view))
        else {
            return Err(TableError::Refused("no feature log table".into()).into());
        };
        let rows = RolloverRows {
            fingerprint: || batch_id,
            files: || Ok((vec![batch.clone()], properties)),
        };
        match writer.commit(table, rows, Vec::new()).await {
            Ok(landed) => Ok(landed.version),
            Err(e @ RolloverError::Commit(_)) => {
                // Another writer's version, or a commit that may have landed: read the
                // table's newest version before the next attempt.
                if let Err(refresh) = table.refresh().await {
                    tracing::debug!(error = %refresh, "cannot refresh the feature log table");
                }
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The table of `view`, opened (or created) now if it is not yet.
    async fn table(&mut self, view: usize) -> Result<&mut Table, TableError> {
        let slot = &mut self.tables[view];
        if slot.is_none() {
            let log_view = &self.shared.views[view];
            let name = &log_view.view.name;
            let location = self
                .settings
                .root
                .table(name)
                .map_err(|e| TableError::Refused(e.to_string()))?;
            let (table, opened) = Table::open(
                location,
                name,
                &log_view.schema,
                &[LOG_DATE.to_string()],
                defaults::CHECKPOINT_INTERVAL,
                &rows::stats_columns(&log_view.view),
                false,
            )
            .await?;
            tracing::info!(view = %name, table = %table.url(), version = table.version(), ?opened, "feature log table ready");
            *slot = Some(table);
        }
        slot.as_mut()
            .ok_or_else(|| TableError::Refused("no feature log table".into()))
    }
}

/// Sleeps until `at`; forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
