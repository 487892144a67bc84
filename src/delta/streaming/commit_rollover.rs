//! Committing a rollover (see [`super`] for the protocol and [`super::rollover`] for what a
//! commit may take).

use std::time::Instant;

use super::{fatal, DeltaSink};
use crate::delta::table::positions::{representable, transactions};
use crate::delta::writer::{Landed, RolloverError, RolloverRows};
use crate::delta::{metadata_keys, writer_properties, CommitError};
use crate::retry::Backoff;
use crate::sink::SinkError;
use crate::source::{MessagePosition, OfflineOrigins};

impl DeltaSink {
    /// Commits what the rollover may take: skip rows the table holds, take per partition the
    /// unbroken run from the table's position (see [`super::rollover`]), write those files
    /// and commit them with their positions as the version after the one the sink knows. If
    /// another writer wrote that version first, refresh (read the commits not seen yet) and
    /// start over. The sink does not read the log before a commit that nothing suggests is
    /// stale: the conditional put of the commit finds out. Returns the durable messages.
    pub(super) async fn commit(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        if self.rollover.messages() == 0 {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let labels = self.labels();
        let mut backoff = Backoff::default();
        let taken = loop {
            let table = self
                .table
                .as_mut()
                .ok_or_else(|| SinkError::fatal("no table"))?;
            if self.stale {
                if let Err(e) = table.refresh().await {
                    self.pause(&mut backoff, "cannot read the offline table", &e)
                        .await?;
                    continue;
                }
                self.stale = false;
            }
            let mut streams = self.rollover.partitions();
            streams.extend(self.rollover.origin_streams());
            self.learn_positions(&streams).await?;
            let table = self
                .table
                .as_ref()
                .ok_or_else(|| SinkError::fatal("no table"))?;
            let dropped = self.rollover.drop_held(table.positions()).map_err(fatal)?;
            let gaps = self.rollover.gaps(table.positions());
            if !gaps.is_empty() {
                self.bridge.learn(&gaps).await;
            }
            let (cuts, accepted) =
                self.rollover
                    .cuts(table.positions(), self.gap_grace, self.bridge.bridged());
            self.count_skipped(dropped);
            for (partition, held, next) in &accepted {
                tracing::warn!(%partition, ?held, ?next, "messages between what the table holds and the next one never arrived (expired or deleted?); committing past them");
            }
            let taken = self.rollover.split(&cuts).map_err(fatal)?;
            if self.rollover.positions().next().is_some() {
                tracing::debug!(
                    waiting = self.rollover.messages(),
                    "messages after a gap wait for it to fill"
                );
                // Another writer may fill it: look at the log before the next commit.
                self.stale = true;
            }
            if taken.rows() == 0 {
                // Nothing to commit: the next commit continues after these messages.
                if let Some(table) = self.table.as_ref() {
                    self.bridge
                        .released_without_commit(table.positions(), taken.commit_keys());
                }
                break taken;
            }
            let table = self
                .table
                .as_mut()
                .ok_or_else(|| SinkError::fatal("no table"))?;
            let now_ms = chrono::Utc::now().timestamp_millis();
            let mut txns = Vec::new();
            let origin_keys = match self.offline_origins {
                OfflineOrigins::AllRegions => taken.origin_commit_keys(),
                OfflineOrigins::OwnRegion => Default::default(),
            };
            for (partition, key) in taken.commit_keys().into_iter().chain(origin_keys) {
                if !representable(key) {
                    return Err(SinkError::fatal(format!("message id {key:?} of {partition} does not fit a Delta transaction version")));
                }
                if table
                    .positions()
                    .get(&partition)
                    .is_none_or(|held| key > held)
                {
                    txns.extend(transactions(&partition, key, now_ms));
                }
            }
            // Same messages and same rows: the files written before a failed attempt still
            // fit. (Fingerprinted only after a failed attempt: a commit that lands needs none.)
            let rows = RolloverRows {
                fingerprint: || fingerprint(taken.rows(), taken.positions()),
                files: || {
                    let properties = writer_properties(
                        &self.config,
                        vec![
                            (metadata_keys::PIPELINE.into(), self.spec.pipeline.clone()),
                            (
                                metadata_keys::SCHEMA_FINGERPRINT.into(),
                                self.schema_fingerprint.clone(),
                            ),
                            (metadata_keys::MESSAGE_RANGES.into(), taken.ranges_json()),
                        ],
                    )?;
                    Ok((taken.row_batches(), properties))
                },
            };
            match self.writer.commit(table, rows, txns).await {
                Ok(Landed {
                    version,
                    files,
                    bytes,
                }) => {
                    tracing::info!(
                        version,
                        files,
                        bytes,
                        rows = taken.rows(),
                        "offline rollover committed"
                    );
                    if let Some(metrics) = &self.metrics {
                        metrics.offline_commits.get_or_create(&labels).inc();
                        metrics
                            .parquet_files_written
                            .get_or_create(&labels)
                            .inc_by(files as u64);
                        metrics
                            .parquet_bytes_written
                            .get_or_create(&labels)
                            .inc_by(bytes);
                        metrics
                            .offline_table_version
                            .get_or_create(&labels)
                            .set(i64::try_from(version).unwrap_or(i64::MAX));
                    }
                    let arrow_bytes = taken.arrow_bytes();
                    if arrow_bytes > 0 && bytes > 0 {
                        self.encoded_per_arrow_byte = bytes as f64 / arrow_bytes as f64;
                    }
                    break taken;
                }
                Err(RolloverError::Settings(e)) => {
                    return Err(SinkError::fatal_from("Parquet settings", e));
                }
                Err(e @ (RolloverError::Table(_) | RolloverError::Files(_))) => {
                    self.rollover.put_back(taken);
                    self.pause(&mut backoff, "writing Parquet files failed", &e)
                        .await?;
                }
                Err(RolloverError::Commit(CommitError::Conflict(version))) => {
                    tracing::info!(
                        version,
                        "another writer committed first; re-checking what the table holds"
                    );
                    if let Some(metrics) = &self.metrics {
                        metrics
                            .offline_commit_conflicts
                            .get_or_create(&labels)
                            .inc();
                    }
                    self.rollover.put_back(taken);
                    self.stale = true;
                }
                Err(RolloverError::Commit(CommitError::Failed(e))) => {
                    // It may have landed: the refresh at the top of the loop finds out.
                    self.rollover.put_back(taken);
                    self.stale = true;
                    self.pause(&mut backoff, "offline commit failed", &e)
                        .await?;
                }
            }
        };
        if let Some(metrics) = &self.metrics {
            metrics
                .offline_commit_seconds
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
        }
        Ok(taken.into_positions())
    }

    pub(super) fn count_skipped(&self, rows: usize) {
        if rows == 0 {
            return;
        }
        tracing::info!(
            dropped = rows,
            "skipping rows already committed (redelivered, or committed by another writer)"
        );
        if let Some(metrics) = &self.metrics {
            metrics
                .offline_rows_skipped
                .get_or_create(&self.labels())
                .inc_by(rows as u64);
        }
    }

    /// Sets how long messages after a gap wait for it to fill (a backfill never commits past
    /// a gap: `Duration::MAX`).
    pub fn set_gap_grace(&mut self, grace: std::time::Duration) {
        self.gap_grace = grace;
    }

    /// Rows still buffered (after a flush: rows that could not be committed because of a gap).
    pub fn buffered_rows(&self) -> usize {
        self.rollover.rows()
    }
}

/// Identifies a set of taken messages and its row count, to tell whether files written for
/// an earlier attempt still fit (compared with the previous attempt's only).
fn fingerprint<'a>(rows: usize, positions: impl Iterator<Item = &'a MessagePosition>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    rows.hash(&mut hasher);
    for position in positions {
        position.hash(&mut hasher);
    }
    hasher.finish()
}
