//! The one rollover writer: how buffered rows become one table version. Both writers of
//! tables use it: the offline sink (its rollover's rows with their topic positions) and the
//! feature log (served rows, no positions).
//!
//! A rollover is due once it holds [`RolloverLimits::rows`] rows or its oldest row waited
//! [`RolloverLimits::interval`]. Its Parquet files are written once, then committed with the
//! rollover's application transactions as the version after the one the table knows. A
//! commit that loses the race to another writer or fails keeps its files: the next attempt
//! for the same rows (the same fingerprint) commits them again instead of encoding the rows
//! twice. Files of a commit that never lands are never read (`offline vacuum` removes them).

use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use deltalake::kernel::{Add, Transaction};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;

use super::table::files::write_files;
use super::{CommitError, Committed, Table, TableError};

/// When a rollover is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolloverLimits {
    /// Rows that make it due.
    pub rows: usize,
    /// How long its oldest row may wait.
    pub interval: Duration,
}

impl RolloverLimits {
    /// Whether a rollover of `rows` rows, opened at `opened` (none: nothing taken yet), is
    /// due at `now`. By age even without rows: the offline sink's rollover may hold only
    /// messages whose rows it leaves out, and they are acknowledged by its commit.
    pub fn due(&self, rows: usize, opened: Option<Instant>, now: Instant) -> bool {
        rows >= self.rows
            || opened.is_some_and(|at| now.saturating_duration_since(at) >= self.interval)
    }

    /// When a rollover opened at `opened` becomes due by age.
    pub fn due_at(&self, opened: Option<Instant>) -> Option<Instant> {
        opened.map(|at| at + self.interval)
    }
}

/// What a landed rollover added to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    /// The table version it made.
    pub version: u64,
    /// Data files added.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// Why a rollover did not land.
#[derive(Debug, thiserror::Error)]
pub enum RolloverError {
    /// The Parquet settings are unusable (a bad `zstd_level`); retrying will not help.
    #[error("Parquet settings: {0}")]
    Settings(#[source] ParquetError),
    /// The table could not be read to write files into; nothing was committed.
    #[error(transparent)]
    Table(#[from] TableError),
    /// The data files could not be written; nothing was committed.
    #[error("writing Parquet files failed: {0}")]
    Files(#[source] deltalake::DeltaTableError),
    /// The commit did not land: another writer's version came first, or it failed (it may
    /// have landed: read the table before the next attempt).
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// The rows of one rollover as the writer takes them.
pub struct RolloverRows<Fingerprint, Files> {
    /// Identifies the rollover's rows (its messages and row count): worked out only when a
    /// failed attempt left files, to tell whether they still fit.
    pub fingerprint: Fingerprint,
    /// The rows as table batches and the Parquet settings of their files; asked for only
    /// when files must be written.
    pub files: Files,
}

/// Commits rollovers of one table, keeping the files of an attempt that did not land.
#[derive(Default)]
pub struct RolloverWriter {
    /// Files of the last attempt that did not land, with the fingerprint of its rows.
    written: Option<(u64, Vec<Add>)>,
}

impl RolloverWriter {
    /// Writes `rows`' files (or reuses those of a failed attempt for the same rows) and
    /// commits them with `transactions` on top of the version `table` knows.
    pub async fn commit<Fingerprint, Files>(
        &mut self,
        table: &mut Table,
        rows: RolloverRows<Fingerprint, Files>,
        transactions: Vec<Transaction>,
    ) -> Result<Landed, RolloverError>
    where
        Fingerprint: Fn() -> u64,
        Files: FnOnce() -> Result<(Vec<RecordBatch>, WriterProperties), ParquetError>,
    {
        let adds = match self.written.take() {
            Some((same, adds)) if same == (rows.fingerprint)() => adds,
            _ => {
                let (batches, properties) = (rows.files)().map_err(RolloverError::Settings)?;
                write_files(table.files_table().await?, batches, properties)
                    .await
                    .map_err(RolloverError::Files)?
            }
        };
        let files = adds.len();
        let bytes = adds
            .iter()
            .map(|a| u64::try_from(a.size).unwrap_or(0))
            .sum();
        match table.commit(adds.clone(), transactions).await {
            Ok(Committed { version, .. }) => Ok(Landed {
                version,
                files,
                bytes,
            }),
            Err(e) => {
                self.written = Some(((rows.fingerprint)(), adds));
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollover_is_due_by_rows_or_by_the_age_of_what_it_took_first() {
        let limits = RolloverLimits {
            rows: 100,
            interval: Duration::from_secs(60),
        };
        let now = Instant::now();
        let opened = now.checked_sub(Duration::from_secs(61));
        assert!(limits.due(100, Some(now), now));
        assert!(!limits.due(99, Some(now), now));
        assert!(limits.due(1, opened, now));
        assert!(limits.due(0, opened, now));
        assert!(!limits.due(0, None, now));
        assert_eq!(
            limits.due_at(Some(now)),
            Some(now + Duration::from_secs(60))
        );
        assert_eq!(limits.due_at(None), None);
    }
}
