//! The service file's `audit:` section: the continuous audit inside `run`.

use std::time::Duration;

use serde::Deserialize;

/// How `run` audits its pipelines (those with both an online and an offline sink).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Audit while running; off by default.
    #[serde(default)]
    pub enabled: bool,
    /// Time between two audits of a pipeline (the first runs one interval after start).
    #[serde(default = "default_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// Entities per audit, chosen by key hash (the same ones each time).
    #[serde(default = "default_sample")]
    pub sample: usize,
    /// How far back an audit looks: entities with no event in the window are left out, and
    /// the table's partitions before it are not read.
    #[serde(default = "default_window", with = "humantime_serde")]
    pub window: Duration,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: default_interval(),
            sample: default_sample(),
            window: default_window(),
        }
    }
}

fn default_interval() -> Duration {
    Duration::from_secs(60)
}

fn default_sample() -> usize {
    10_000
}

fn default_window() -> Duration {
    Duration::from_secs(24 * 3600)
}

impl AuditConfig {
    /// Problems with the section, as `(key, message)`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.enabled && self.interval < Duration::from_secs(1) {
            problems.push((
                "interval",
                "must be at least 1s (every audit reads the table's recent files)".to_string(),
            ));
        }
        if self.enabled && self.sample == 0 {
            problems.push(("sample", "must be at least 1 entity".to_string()));
        }
        if self.enabled && self.window.is_zero() {
            problems.push(("window", "must be longer than 0s".to_string()));
        }
        problems
    }
}
