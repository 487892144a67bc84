//! `offline vacuum`: deleting data files no version references any more.

use std::time::Duration;

use deltalake::operations::vacuum::VacuumMode;

use crate::delta::{Table, TableError};

/// Deletes data files no version newer than `retain` references (files replaced by a
/// compaction, files of rollovers whose commit never landed); returns the paths.
pub async fn vacuum(
    table: &mut Table,
    retain: Duration,
    dry_run: bool,
) -> Result<Vec<String>, TableError> {
    let retention = chrono::Duration::from_std(retain)
        .map_err(|e| TableError::Refused(format!("retention {retain:?}: {e}")))?;
    let (_, metrics) = table
        .load_full()
        .await?
        .vacuum()
        .with_retention_period(retention)
        .with_enforce_retention_duration(false)
        .with_mode(VacuumMode::Full)
        .with_dry_run(dry_run)
        .await
        .map_err(|source| TableError::Delta {
            what: "vacuuming the table",
            source,
        })?;
    table.refresh().await?;
    Ok(metrics.files_deleted)
}
