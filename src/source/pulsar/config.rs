//! Settings of the Pulsar source: the service part (cluster) and the pipeline part (topic).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::config::{issue_at, ConfigIssue, Spanned};

/// Where the Pulsar cluster is (service file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PulsarServiceConfig {
    /// Binary protocol URL, e.g. `pulsar://127.0.0.1:6650`.
    pub url: String,
    /// Admin REST URL, e.g. `http://127.0.0.1:8080` (schema registry, stats).
    pub admin_url: String,
}

/// Subscription types, with Pulsar's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum SubscriptionKind {
    /// One consumer only.
    #[serde(rename = "Exclusive", alias = "exclusive")]
    Exclusive,
    /// Round-robin over consumers.
    #[serde(rename = "Shared", alias = "shared")]
    Shared,
    /// One active consumer, others on standby.
    #[serde(rename = "Failover", alias = "failover")]
    Failover,
    /// Keys spread over consumers; one key always goes to one consumer.
    #[default]
    #[serde(rename = "Key_Shared", alias = "key_shared")]
    KeyShared,
}

/// Where a new subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StartPosition {
    /// The oldest retained message.
    #[default]
    Earliest,
    /// Only messages published after subscribing.
    Latest,
}

/// The topic a pipeline consumes (pipeline file, `source:`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PulsarSourceConfig {
    /// Full topic name, `persistent://tenant/namespace/topic`.
    pub topic: Spanned<String>,
    /// Subscription name prefix: the online sink subscribes as `<subscription>-online`,
    /// the offline sink as `<subscription>-offline`.
    pub subscription: Spanned<String>,
    /// Type of the online subscription. The offline subscription is `Failover` (or
    /// `Exclusive` when this is `Exclusive`) because it acknowledges cumulatively.
    #[serde(default)]
    pub subscription_type: SubscriptionKind,
    /// Where a new subscription starts.
    #[serde(default)]
    pub initial_position: StartPosition,
    /// Messages the broker may push ahead of processing (per consumer).
    #[serde(default = "default_receiver_queue")]
    pub receiver_queue_size: u32,
    /// Most messages per processing batch.
    #[serde(default = "default_max_batch")]
    pub max_batch_messages: usize,
    /// Longest wait to fill a batch once its first message arrived.
    #[serde(default = "default_linger", with = "humantime_serde")]
    pub max_batch_wait: Duration,
    /// Dead-letter topic for messages that cannot be decoded;
    /// default `<topic>-<subscription>-DLQ`.
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
}

fn default_receiver_queue() -> u32 {
    1000
}
fn default_max_batch() -> usize {
    1000
}
fn default_linger() -> Duration {
    Duration::from_millis(5)
}

impl PulsarSourceConfig {
    /// Problems a YAML parser cannot see.
    pub fn check(&self, file: &Path) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        if !is_full_topic_name(&self.topic.value) {
            issues.push(issue_at(
                file,
                &self.topic,
                "source.topic",
                format!(
                    "`{}` is not a full topic name; write persistent://tenant/namespace/topic",
                    self.topic.value
                ),
            ));
        }
        if self.subscription.value.trim().is_empty() {
            issues.push(issue_at(
                file,
                &self.subscription,
                "source.subscription",
                "must not be empty",
            ));
        }
        if self.max_batch_messages == 0 {
            issues.push(ConfigIssue {
                file: file.to_path_buf(),
                line: None,
                key: Some("source.max_batch_messages".into()),
                message: "must be at least 1".into(),
            });
        }
        issues
    }

    /// The dead-letter topic for this source.
    pub fn dead_letter_topic(&self) -> String {
        self.dead_letter_topic
            .clone()
            .unwrap_or_else(|| format!("{}-{}-DLQ", self.topic.value, self.subscription.value))
    }
}

fn is_full_topic_name(topic: &str) -> bool {
    let rest = topic
        .strip_prefix("persistent://")
        .or_else(|| topic.strip_prefix("non-persistent://"));
    match rest {
        Some(rest) => {
            let parts: Vec<&str> = rest.split('/').collect();
            parts.len() == 3 && parts.iter().all(|p| !p.is_empty())
        }
        None => false,
    }
}
