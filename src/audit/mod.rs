//! Training–serving consistency: per entity, the online store's row against the offline
//! table's newest committed row, classified (equal, online ahead, table ahead, skew,
//! missing online or offline) with per-feature mismatch ratios and numeric error.
//!
//! The table is read first (one snapshot), then the online store: a value that reaches
//! both stores in between shows as online ahead, never as a defect. `feature-connector
//! audit` runs it once ([`audit`]); `run` runs it on a sample at an interval
//! ([`continuous`]); `audit --served` compares the log of served features with the table
//! at each request's time (`served`).

mod aggregated;
mod classify;
mod config;
pub mod continuous;
mod offline;
mod online;
mod report;
mod sample;
mod served;
mod values;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

pub use classify::{
    compare, Comparison, EntityKey, FeatureComparison, OfflineRow, OnlineRow, Outcome,
};
pub use config::AuditConfig;
pub use report::{AuditReport, Example, FeatureReport, LagReport};
pub use sample::Selection;
pub use served::audit_served;

use crate::delta::read::FileReadError;
use crate::delta::{Table, TableError, TableLocation};
use crate::record::{entity_hash, RowLayout};
use crate::redis::RedisServiceConfig;
use crate::serving::{FeatureReader, FeatureView, QueryError};
use crate::training::{EventSource, TrainingError};
pub(crate) use report::TableRead;
use report::{ReportHead, Tally};
use sample::Sampler;

/// Why an audit could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A data file of the table could not be read.
    #[error("offline table: {0}")]
    TableFile(#[from] FileReadError),
    /// The table's log could not be read.
    #[error("offline table: {0}")]
    TableLog(#[from] TableError),
    /// The online store's client could not be set up.
    #[error("online store: {0}")]
    OnlineSetup(#[from] crate::redis::RedisSetupError),
    /// Scanning the online store's keys failed.
    #[error("online store: scanning keys: {0}")]
    Scan(#[from] redis::RedisError),
    /// A read of the online store failed.
    #[error("online store: {0}")]
    Query(#[from] QueryError),
    /// The aggregated features could not be worked out from the table.
    #[error("aggregated features from the table: {0}")]
    Aggregated(#[from] TrainingError),
}

/// What an audit compares: a pipeline's online view and its offline table.
#[derive(Clone)]
pub struct AuditTarget {
    /// The pipeline's name.
    pub pipeline: String,
    /// Its online view.
    pub view: FeatureView,
    /// Where keys, event time and features are in its rows (and the table's columns).
    pub layout: RowLayout,
    /// Its offline table.
    pub table: TableLocation,
    /// The Redis the online view lives in.
    pub redis: RedisServiceConfig,
    /// Where its aggregations find their events in the table; `None` without aggregations.
    pub aggregations: Option<EventSource>,
}

impl AuditTarget {
    /// The online sink's TTL in milliseconds.
    fn ttl_ms(&self) -> Option<i64> {
        self.view
            .ttl
            .map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
    }

    /// An empty tally of the view's keys and features.
    fn tally(&self) -> Tally {
        let keys = self.view.keys.iter().map(|(k, _)| k.clone()).collect();
        let features = self.view.features.iter().map(|(f, _)| f.clone()).collect();
        Tally::new(keys, features)
    }
}

/// Audits `target` over the entities `selection` chooses; files of partitions that ended
/// before `since_ms` are not read, and entities with no event since then are left out.
pub async fn audit(
    target: &AuditTarget,
    selection: Selection,
    since_ms: Option<i64>,
) -> Result<AuditReport, AuditError> {
    let started = Instant::now();
    let audited_at_ms = chrono::Utc::now().timestamp_millis();
    let mut sampler = Sampler::new(selection);
    let table = Table::open_existing(target.table.clone()).await?;
    let mut read = TableRead {
        version: table.version(),
        ..TableRead::default()
    };
    let mut table_rows = HashMap::new();
    offline::read_recent(
        &table,
        table.active_files().await?,
        &target.layout,
        &mut sampler,
        since_ms,
        &mut table_rows,
        &mut read,
    )
    .await?;
    let (report, _) = compare_with_online(
        target,
        &mut sampler,
        &mut table_rows,
        read,
        since_ms,
        audited_at_ms,
        started,
    )
    .await?;
    Ok(report)
}

/// The second half of an audit, once the table's newest rows of the sampled entities are
/// in `table_rows`: the online store's entities offered to `sampler` too (evicted ones
/// leave `table_rows`), their online rows read, every entity compared. Returns the report
/// and the entities that are only online.
pub(crate) async fn compare_with_online(
    target: &AuditTarget,
    sampler: &mut Sampler,
    table_rows: &mut HashMap<EntityKey, OfflineRow>,
    read: TableRead,
    since_ms: Option<i64>,
    audited_at_ms: i64,
    started: Instant,
) -> Result<(AuditReport, Vec<EntityKey>), AuditError> {
    let mut online_only = Vec::new();
    let scanned = online::scan_entities(
        &target.redis,
        &target.view,
        sampler,
        |evicted| {
            table_rows.remove(&evicted);
        },
        &mut online_only,
    )
    .await?;
    let named = sampler.named().cloned();
    let entities: Vec<EntityKey> = match &named {
        Some(names) => names.iter().cloned().collect(),
        None => {
            let mut seen: HashSet<&EntityKey> = HashSet::with_capacity(table_rows.len());
            let mut keys = Vec::with_capacity(table_rows.len() + online_only.len());
            for key in table_rows.keys().chain(online_only.iter()) {
                if sampler.admits(key, entity_hash(key)) && seen.insert(key) {
                    keys.push(key.clone());
                }
            }
            keys
        }
    };
    let reader = FeatureReader::new(&target.redis, [target.view.clone()], None)?;
    let online_rows = online::read_rows(&reader, &target.view, &entities).await?;
    let ttl_ms = target.ttl_ms();
    let mut compared = Vec::with_capacity(entities.len());
    for (entity, online) in entities.iter().zip(&online_rows) {
        let offline = table_rows.get(entity);
        let newest = online
            .as_ref()
            .map(|o| o.event_time_ms)
            .max(offline.map(|o| o.event_time_ms));
        if since_ms.is_some_and(|since| newest.is_none_or(|newest| newest < since))
            && named.is_none()
        {
            // No event in the window: outside this audit.
            continue;
        }
        let comparison = compare(online.as_ref(), offline, ttl_ms, audited_at_ms);
        if comparison.outcome == Outcome::Absent && named.is_none() {
            // A key of another view sharing the Feast hash: not this view's entity.
            continue;
        }
        compared.push((entity, online.as_ref(), offline, comparison));
    }
    if let Some(source) = &target.aggregations {
        add_aggregated(target, source, &reader, &mut compared).await?;
    }
    let mut tally = target.tally();
    for (entity, online, offline, comparison) in &compared {
        tally.add(
            entity,
            comparison,
            online.map(|o| o.event_time_ms),
            offline.map(|o| o.event_time_ms),
        );
    }
    let report = tally.into_report(ReportHead {
        pipeline: target.pipeline.clone(),
        selection: sampler.describe(),
        read,
        online_keys_scanned: scanned,
        audited_at_ms,
        started,
    });
    let online_only = online_only
        .into_iter()
        .filter(|key| !table_rows.contains_key(key))
        .collect();
    Ok((report, online_only))
}

/// An entity compared: its key, its online row, its table row, the comparison.
type Compared<'a> = (
    &'a EntityKey,
    Option<&'a OnlineRow>,
    Option<&'a OfflineRow>,
    Comparison,
);

/// Adds the aggregated features to the comparisons of the entities equal in both stores
/// ([`aggregated`]); a differing one makes the entity a skew.
async fn add_aggregated(
    target: &AuditTarget,
    source: &EventSource,
    reader: &FeatureReader,
    compared: &mut [Compared<'_>],
) -> Result<(), AuditError> {
    let plain = target.view.plain_features();
    let agreed: Vec<(EntityKey, i64)> = compared
        .iter()
        .filter(|(_, _, _, c)| c.outcome == Outcome::Equal)
        .filter_map(|(entity, online, _, _)| Some(((*entity).clone(), (*online)?.event_time_ms)))
        .collect();
    let mut found = aggregated::compare_aggregated(target, source, reader, &agreed)
        .await?
        .into_iter();
    for (_, online, _, comparison) in compared.iter_mut() {
        if comparison.outcome != Outcome::Equal || online.is_none() {
            continue;
        }
        let Some(Some(features)) = found.next() else {
            continue;
        };
        comparison
            .features
            .resize(plain, FeatureComparison::not_compared());
        if features.iter().any(|f| !f.equal) {
            comparison.outcome = Outcome::Skew;
        }
        comparison.features.extend(features);
    }
    Ok(())
}
