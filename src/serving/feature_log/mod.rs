//! Logging served features (`serving.feature_logging`): the rows of every
//! `/get-online-features` answer, for the views named and a share of their entities, in a
//! Delta table per view at `<url>/<view>` (columns in `rows`), so that a training set "as
//! served" is one join away and an audit can compare served values with the offline table.
//!
//! Serving never waits on it: once the answer is written, [`FeatureLog::offer`] hands the
//! request's rows (the join keys and what Redis held, moved, not copied) to a queue bounded
//! in rows (`queue_rows`, counting rows until their commit); when it is full the rows are
//! dropped and counted (`feature_log_rows{outcome="dropped"}`). One task per process
//! (`writer`) turns them into Arrow batches per view and commits them through
//! [`crate::delta::RolloverWriter`] (the offline sink's, with the table defaults of
//! [`crate::delta::defaults`]), once `rollover_rows` rows of a view wait or its oldest
//! waited `rollover_interval`; a failed write or commit is retried with
//! backoff, and what it holds at shutdown is committed before the process exits.
//!
//! A commit whose outcome the store left unknown is tried again, so a row can (rarely) be
//! logged twice; none is logged twice otherwise.

mod rows;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{FeatureLoggingConfig, FeatureView, Found, Lookup};
use crate::delta::{LayoutError, StoreError, TableRoot};
use crate::metrics::{FeatureLogLabels, Metrics};
use crate::record::SampleRate;
pub use rows::{EVENT_TIMESTAMP, LOG_DATE, LOG_TIMESTAMP, REQUEST_ID, STATUS_SUFFIX};

/// The feature log could not start.
#[derive(Debug, thiserror::Error)]
pub enum FeatureLogError {
    /// The URL could not be opened.
    #[error("serving.feature_logging.url: {0}")]
    Store(#[from] StoreError),
    /// A view's columns have no Delta type.
    #[error("serving.feature_logging: view `{view}`: {source}")]
    Schema {
        /// View.
        view: String,
        /// Why.
        source: LayoutError,
    },
    /// A view named is not served.
    #[error("serving.feature_logging.views: no online view `{0}`")]
    UnknownView(String),
}

/// One logged view: what its rows are and how many are kept.
pub(crate) struct LogView {
    pub(crate) view: FeatureView,
    rate: SampleRate,
    pub(crate) schema: SchemaRef,
    pub(crate) logged: Counter,
    dropped: Counter,
}

/// What one answer hands the log for one view.
pub(crate) struct LoggedRequest {
    /// Index of the view among the log's.
    pub(crate) view: usize,
    pub(crate) request_id: Arc<str>,
    /// The request time, epoch microseconds.
    pub(crate) log_time_us: i64,
    /// The view's features asked, in the answer's order.
    pub(crate) features: Vec<usize>,
    /// Per feature asked, every row's status as the answer gave it.
    pub(crate) statuses: Vec<Vec<&'static str>>,
    /// The rows kept.
    pub(crate) rows: Vec<LoggedRow>,
}

/// One entity row kept.
pub(crate) struct LoggedRow {
    /// Its position among the request's rows.
    pub(crate) index: usize,
    /// Join key values as text, in key order.
    pub(crate) keys: Vec<String>,
    /// What Redis held.
    pub(crate) found: Found,
}

/// What the handlers and the writer task share.
pub(crate) struct Shared {
    pub(crate) views: Vec<LogView>,
    by_name: HashMap<String, usize>,
    /// Rows offered and not yet committed (or given up).
    waiting: AtomicUsize,
    queue_rows: usize,
    /// Random per process: request ids are it with the request's number mixed in.
    id_base: u128,
    /// Requests logged so far.
    requests: AtomicU64,
}

impl Shared {
    /// A new request id: a UUID v4 unique in this process (its random bits are the
    /// process's base with a counter mixed in), made without a system call per request.
    fn request_id(&self) -> uuid::Uuid {
        let n = u128::from(self.requests.fetch_add(1, Ordering::Relaxed));
        // The counter stays in the low 62 bits, clear of the version and variant bits.
        let bytes = (self.id_base ^ n).to_be_bytes();
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    /// Takes room for `rows` more rows, unless that would pass `queue_rows`.
    fn reserve(&self, rows: usize) -> bool {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                let after = waiting.checked_add(rows)?;
                (after <= self.queue_rows).then_some(after)
            })
            .is_ok()
    }

    /// Gives back the room of `rows` rows committed or given up.
    pub(crate) fn release(&self, rows: usize) {
        let _ = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                Some(waiting.saturating_sub(rows))
            });
    }
}

/// The serving side of the feature log: offers answered rows to the writer task.
#[derive(Clone)]
pub struct FeatureLog {
    shared: Arc<Shared>,
    sender: mpsc::UnboundedSender<LoggedRequest>,
}

/// Settings of the writer task.
pub(crate) struct WriterSettings {
    pub(crate) root: TableRoot,
    pub(crate) rollover_rows: usize,
    pub(crate) rollover_interval: std::time::Duration,
}

impl FeatureLog {
    /// Starts the log of `config` for the served `views`: the handle the handlers offer rows
    /// to, and the writer task, which ends (having committed what it holds) once every
    /// handle is dropped after `cancel` fired. `root` resolves relative `file://` URLs;
    /// `options` are the service file's `object_store.options`.
    pub fn start(
        config: &FeatureLoggingConfig,
        views: &[FeatureView],
        root: &Path,
        options: &BTreeMap<String, String>,
        metrics: &Metrics,
        cancel: CancellationToken,
    ) -> Result<(Self, JoinHandle<()>), FeatureLogError> {
        let url = config.url.as_deref().unwrap_or_default();
        let store = TableRoot::open(url, root, options)?;
        let (log, receiver) = Self::new(config, views, metrics)?;
        let settings = WriterSettings {
            root: store,
            rollover_rows: config.rollover_rows,
            rollover_interval: config.rollover_interval,
        };
        let task = writer::Writer::new(log.shared.clone(), settings, cancel);
        Ok((log, tokio::spawn(task.run(receiver))))
    }

    /// The handle and the receiving end of its queue, without a writer.
    pub(crate) fn new(
        config: &FeatureLoggingConfig,
        views: &[FeatureView],
        metrics: &Metrics,
    ) -> Result<(Self, mpsc::UnboundedReceiver<LoggedRequest>), FeatureLogError> {
        let mut logged = Vec::new();
        let mut by_name = HashMap::new();
        for (name, rate) in &config.views {
            let view = views
                .iter()
                .find(|v| &v.name == name)
                .ok_or_else(|| FeatureLogError::UnknownView(name.clone()))?;
            let schema = rows::log_schema(view).map_err(|source| FeatureLogError::Schema {
                view: name.clone(),
                source,
            })?;
            let counter = |outcome| {
                metrics
                    .consistency
                    .feature_log_rows
                    .get_or_create(&FeatureLogLabels {
                        view: name.clone(),
                        outcome,
                    })
                    .clone()
            };
            by_name.insert(name.clone(), logged.len());
            logged.push(LogView {
                view: view.clone(),
                rate: SampleRate::new(*rate),
                schema,
                logged: counter("logged"),
                dropped: counter("dropped"),
            });
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            views: logged,
            by_name,
            waiting: AtomicUsize::new(0),
            queue_rows: config.queue_rows,
            id_base: uuid::Uuid::new_v4().as_u128(),
            requests: AtomicU64::new(0),
        });
        Ok((Self { shared, sender }, receiver))
    }

    /// Whether any view of `lookups` is logged (worth the answer's statuses).
    pub fn logs_any(&self, lookups: &[Lookup<'_>]) -> bool {
        lookups
            .iter()
            .any(|l| self.shared.by_name.contains_key(&l.view.name))
    }

    /// Offers the rows of one answer: per view of the request (`lookups`, with `found`, what
    /// Redis held per row), `statuses` per feature column in the answer's order (views one
    /// after the other), at request time `log_time_us`. Never waits: rows that do not fit the
    /// queue are dropped and counted.
    pub fn offer(
        &self,
        lookups: Vec<Lookup<'_>>,
        found: Vec<Vec<Found>>,
        statuses: Vec<Vec<&'static str>>,
        log_time_us: i64,
    ) {
        let mut statuses = statuses.into_iter();
        let mut request_id: Option<Arc<str>> = None;
        for (lookup, rows) in lookups.into_iter().zip(found) {
            let view_statuses: Vec<_> = statuses.by_ref().take(lookup.features.len()).collect();
            let Some(&index) = self.shared.by_name.get(&lookup.view.name) else {
                continue;
            };
            let Some(log_view) = self.shared.views.get(index) else {
                continue;
            };
            let kept: Vec<LoggedRow> = lookup
                .entities
                .into_iter()
                .zip(rows)
                .enumerate()
                .filter(|(_, (keys, _))| log_view.rate.keeps(keys))
                .map(|(index, (keys, found))| LoggedRow { index, keys, found })
                .collect();
            if kept.is_empty() {
                continue;
            }
            let count = kept.len();
            if !self.shared.reserve(count) {
                log_view.dropped.inc_by(count as u64);
                continue;
            }
            let id = request_id
                .get_or_insert_with(|| Arc::from(self.shared.request_id().to_string()))
                .clone();
            let request = LoggedRequest {
                view: index,
                request_id: id,
                log_time_us,
                features: lookup.features,
                statuses: view_statuses,
                rows: kept,
            };
            if self.sender.send(request).is_err() {
                // The writer has stopped (shutdown): nothing takes rows any more.
                self.shared.release(count);
                log_view.dropped.inc_by(count as u64);
            }
        }
    }
}
