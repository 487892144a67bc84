//! Settings of the Redis online sink.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::config::ConfigIssue;

/// Where Redis is (service file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisServiceConfig {
    /// `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// Longest wait for one pipelined batch to be answered.
    #[serde(default = "default_response_timeout", with = "humantime_serde")]
    pub response_timeout: Duration,
}

fn default_response_timeout() -> Duration {
    Duration::from_secs(10)
}

/// The online sink of a pipeline (pipeline file, `online:`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnlineSinkConfig {
    /// `false` turns the online sink off.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// First part of every key: `{key_prefix}:{pipeline}:{entity}`.
    #[serde(default = "default_prefix")]
    pub key_prefix: String,
    /// Expiry of an entity's hash, refreshed on each write; absent means no expiry.
    #[serde(default, with = "humantime_serde")]
    pub ttl: Option<Duration>,
}

fn default_true() -> bool {
    true
}
fn default_prefix() -> String {
    "fc".into()
}

impl OnlineSinkConfig {
    /// Problems a YAML parser cannot see.
    pub fn check(&self, file: &Path) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        if self.key_prefix.is_empty() || self.key_prefix.contains(char::is_whitespace) {
            issues.push(ConfigIssue {
                file: file.to_path_buf(),
                line: None,
                key: Some("online.key_prefix".into()),
                message: "must be non-empty and without spaces".into(),
            });
        }
        if self.ttl.is_some_and(|t| t.as_millis() == 0) {
            issues.push(ConfigIssue {
                file: file.to_path_buf(),
                line: None,
                key: Some("online.ttl".into()),
                message: "must be positive; leave it out for no expiry".into(),
            });
        }
        issues
    }
}
