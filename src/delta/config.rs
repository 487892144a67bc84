//! Settings of the offline sink (a Delta Lake table of Parquet files).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::yaml::Spanned;

/// Defaults for the object store (service file, `offline:`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreServiceConfig {
    /// Store URL for pipelines that do not set `offline.url`.
    pub default_url: String,
    /// `object_store` options such as `aws_endpoint`; empty values are ignored.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

/// Parquet column compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Zstandard at `zstd_level`.
    #[default]
    Zstd,
    /// Snappy.
    Snappy,
    /// LZ4 (raw).
    Lz4,
    /// No compression.
    None,
}

/// Which time places a row in a `dt`/`hr` partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PartitionTime {
    /// The row's event time (what training jobs filter on).
    #[default]
    EventTime,
    /// When the rollover was written.
    IngestTime,
}

/// How fine the partitions are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// `dt` only.
    Day,
    /// `dt` and `hr`.
    #[default]
    Hour,
}

/// The offline sink of a pipeline (pipeline file, `offline:`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaSinkConfig {
    /// `false` turns the offline sink off.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// `file://path` (relative to the project root), `s3://bucket/prefix`, `gs://…`,
    /// `az://…`; default: the service's `object_store.default_url`.
    #[serde(default)]
    pub url: Option<Spanned<String>>,
    /// A rollover (one commit) happens once this many rows are buffered.
    #[serde(default = "default_rollover_rows")]
    pub rollover_rows: usize,
    /// A rollover happens once its encoded size would reach this many bytes (estimated from
    /// the buffered Arrow size and the compression ratio of the previous rollover).
    #[serde(default)]
    pub rollover_bytes: Option<u64>,
    /// A rollover happens once its first row is this old.
    #[serde(default = "default_rollover_interval", with = "humantime_serde")]
    pub rollover_interval: Duration,
    /// A rollover holding at least a tenth of `rollover_rows` also happens once no row has
    /// come for this long (a burst or a catch-up ended), instead of waiting out
    /// `rollover_interval`; `0s` turns it off.
    #[serde(default = "default_idle_commit", with = "humantime_serde")]
    pub idle_commit: Duration,
    /// Column compression.
    #[serde(default)]
    pub compression: Compression,
    /// Zstandard level (1–22).
    #[serde(default = "default_zstd_level")]
    pub zstd_level: i32,
    /// Rows per Parquet row group.
    #[serde(default = "default_row_group_rows")]
    pub row_group_rows: usize,
    /// Which time picks a row's Hive partition: `event_time` or `ingest_time`.
    #[serde(default)]
    pub partition_by: PartitionTime,
    /// `hour` (`dt` and `hr` partition columns) or `day` (`dt` only).
    #[serde(default)]
    pub partition_granularity: Granularity,
    /// A checkpoint of the table's log is written every this many commits (the table
    /// property `delta.checkpointInterval`, set when the table is created): start-up reads the
    /// newest checkpoint and at most this many commits after it.
    #[serde(default = "default_checkpoint_interval")]
    pub checkpoint_interval: u64,
}

/// Table settings every writer of a table starts from (the offline sink's defaults; the
/// feature log's tables use them as they are).
pub mod defaults {
    /// Zstandard level of the data files.
    pub const ZSTD_LEVEL: i32 = 3;
    /// Rows per Parquet row group.
    pub const ROW_GROUP_ROWS: usize = 128 * 1024;
    /// `delta.checkpointInterval` of a new table.
    pub const CHECKPOINT_INTERVAL: u64 = 100;
}

fn default_checkpoint_interval() -> u64 {
    defaults::CHECKPOINT_INTERVAL
}

fn default_true() -> bool {
    true
}
/// Bounds the buffered rollover: a buffered row costs about 1 KB of memory until its
/// commit (Arrow rows, positions, Parquet encoding), measured in docs/performance.md.
fn default_rollover_rows() -> usize {
    50_000
}
fn default_rollover_interval() -> Duration {
    Duration::from_secs(60)
}
/// Long enough that a stream's short stalls do not cut a rollover, short against the
/// interval: the end of a catch-up is committed (and acknowledged) within a quarter second.
fn default_idle_commit() -> Duration {
    Duration::from_millis(200)
}
fn default_zstd_level() -> i32 {
    defaults::ZSTD_LEVEL
}
fn default_row_group_rows() -> usize {
    defaults::ROW_GROUP_ROWS
}

/// URL schemes the offline sink accepts.
pub const STORE_SCHEMES: &[&str] = &["file", "s3", "s3a", "gs", "az", "abfs", "abfss", "memory"];

/// Checks that `url` names a supported object store.
pub fn check_store_url(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!(
            "`{url}` is not a URL; write file://path or s3://bucket/prefix"
        ));
    };
    if !STORE_SCHEMES.contains(&scheme) {
        return Err(format!(
            "unsupported scheme `{scheme}://` (use one of: {})",
            STORE_SCHEMES.join(", ")
        ));
    }
    if rest.trim_matches('/').is_empty() && scheme != "memory" {
        return Err(format!("`{url}` names no path or bucket"));
    }
    if scheme != "file" && scheme != "memory" {
        url::Url::parse(url).map_err(|e| format!("`{url}` is not a valid URL: {e}"))?;
    }
    Ok(())
}
