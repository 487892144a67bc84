//! Settings of the Pulsar source: the pipeline part (topic, subscription). The service part
//! (cluster, credentials) is in `service.rs`.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::source::AckMode;
use crate::yaml::{issue_at, ConfigIssue, Spanned};

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

/// How a pipeline's sinks share its topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// One subscription feeds every sink: each event is delivered and decoded once, and
    /// acknowledged once every sink has it durable, so a sink that is down (or slow) pauses
    /// the others too.
    #[default]
    Shared,
    /// One subscription per sink: each sink acknowledges at its own pace and an outage of
    /// one never pauses another, at the price of delivering and decoding every event once
    /// per sink.
    PerSink,
}

impl SubscriptionKind {
    /// The type a subscription gets when a sink it feeds acknowledges with `ack`:
    /// cumulative acknowledgement needs one active consumer per topic partition.
    pub fn for_acknowledgement(self, ack: AckMode) -> SubscriptionKind {
        match (ack, self) {
            (AckMode::Individual, kind)
            | (AckMode::Cumulative, kind @ SubscriptionKind::Exclusive) => kind,
            (AckMode::Cumulative, _) => SubscriptionKind::Failover,
        }
    }

    /// Pulsar's name of the type.
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionKind::Exclusive => "Exclusive",
            SubscriptionKind::Shared => "Shared",
            SubscriptionKind::Failover => "Failover",
            SubscriptionKind::KeyShared => "Key_Shared",
        }
    }
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
    /// One topic (partitioned or not), `persistent://tenant/namespace/topic`.
    #[serde(default)]
    pub topic: Option<Spanned<String>>,
    /// Several topics, consumed by one subscription each lane.
    #[serde(default)]
    pub topics: Vec<Spanned<String>>,
    /// Every topic of one namespace whose full name matches this regular expression,
    /// e.g. `persistent://public/default/features-.*`; new topics are found while running.
    #[serde(default)]
    pub topic_pattern: Option<Spanned<String>>,
    /// How often the namespace is listed for new topics matching `topic_pattern`.
    #[serde(default = "default_pattern_refresh", with = "humantime_serde")]
    pub pattern_refresh: Duration,
    /// Subscription name: with `delivery: shared` the pipeline subscribes as
    /// `<subscription>`; with `per_sink` each sink as `<subscription>-<sink>`
    /// (`-online`, `-offline`).
    pub subscription: Spanned<String>,
    /// How the pipeline's sinks share the topic.
    #[serde(default)]
    pub delivery: Delivery,
    /// Subscription type. A subscription that feeds a sink acknowledging cumulatively (the
    /// offline sink) is `Failover` instead (or `Exclusive` when this is `Exclusive`).
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
    /// Durable subscription the connector keeps on the dead-letter topic so the broker
    /// retains dead letters until someone acknowledges them there (a topic without a
    /// subscription or retention loses them when its ledger rolls over); default
    /// `<subscription>`.
    #[serde(default)]
    pub dead_letter_subscription: Option<Spanned<String>>,
}

fn default_pattern_refresh() -> Duration {
    Duration::from_secs(30)
}
/// Measured (docs/performance.md): 1,000 starves the consumer (the broker waits for
/// permits between small deliveries); 20,000 drains a backlog ~10 % faster than 10,000 for
/// about 10 MB more (about 0.5 KB per queued message).
fn default_receiver_queue() -> u32 {
    20_000
}
/// Measured (docs/performance.md): a catch-up in batches of 2,000 drains ~8 % faster than
/// in batches of 1,000, with ~12 % fewer Redis writes (the newest row per entity per batch);
/// a live stream's batches stay small, since `max_batch_wait` closes them.
fn default_max_batch() -> usize {
    2000
}
fn default_linger() -> Duration {
    Duration::from_millis(5)
}

impl PulsarSourceConfig {
    /// Problems a YAML parser cannot see.
    pub fn check(&self, file: &Path) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let named = [
            self.topic.is_some(),
            !self.topics.is_empty(),
            self.topic_pattern.is_some(),
        ];
        if named.iter().filter(|&&set| set).count() != 1 {
            issues.push(ConfigIssue::at_key(
                file,
                "source.topic",
                "name exactly one of `topic`, `topics` or `topic_pattern`",
            ));
        }
        let explicit = self.topic.iter().map(|t| ("source.topic", t));
        let listed = self.topics.iter().map(|t| ("source.topics", t));
        for (key, topic) in explicit.chain(listed) {
            if !is_full_topic_name(&topic.value) {
                issues.push(issue_at(
                    file,
                    topic,
                    key,
                    format!(
                        "`{}` is not a full topic name; write persistent://tenant/namespace/topic",
                        topic.value
                    ),
                ));
            }
        }
        if let Some(pattern) = &self.topic_pattern {
            issues.extend(self.check_pattern(file, pattern));
        }
        if self.subscription.value.trim().is_empty() {
            issues.push(issue_at(
                file,
                &self.subscription,
                "source.subscription",
                "must not be empty",
            ));
        }
        if let Some(name) = &self.dead_letter_subscription {
            if name.value.trim().is_empty() {
                issues.push(issue_at(
                    file,
                    name,
                    "source.dead_letter_subscription",
                    "must not be empty (leave it out for `<subscription>`)",
                ));
            }
        }
        if self.max_batch_messages == 0 {
            issues.push(ConfigIssue::at_key(
                file,
                "source.max_batch_messages",
                "must be at least 1",
            ));
        }
        issues
    }

    fn check_pattern(&self, file: &Path, pattern: &Spanned<String>) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let at = |message: String| issue_at(file, pattern, "source.topic_pattern", message);
        let regex = match self.pattern_regex() {
            Some(Ok(regex)) => regex,
            Some(Err(e)) => return vec![at(format!("not a regular expression: {e}"))],
            None => return issues,
        };
        if self.pattern_namespace().is_none() {
            issues.push(at(format!(
                "`{}` must start with a literal persistent://tenant/namespace/ (the namespace \
                 whose topics are matched)",
                pattern.value
            )));
        }
        let dead_letter = self.dead_letter_topic();
        if regex.is_match(&dead_letter) {
            issues.push(at(format!(
                "the dead-letter topic `{dead_letter}` matches the pattern, so the pipeline \
                 would read its own rejects; set source.dead_letter_topic outside it"
            )));
        }
        issues
    }

    /// The pattern as matched against the namespace's topics: anchored at both ends (the
    /// whole name must match, as in Pulsar's Java client), a partition suffix allowed.
    pub fn pattern_regex(&self) -> Option<Result<regex::Regex, regex::Error>> {
        let pattern = &self.topic_pattern.as_ref()?.value;
        Some(regex::Regex::new(&format!(
            "^(?:{pattern})(?:-partition-[0-9]+)?$"
        )))
    }

    /// The topics named explicitly (`topic` or `topics`), without any pattern.
    pub fn named_topics(&self) -> Vec<String> {
        self.topic
            .iter()
            .chain(&self.topics)
            .map(|t| t.value.clone())
            .collect()
    }

    /// The topic one-topic commands (`produce`, dead-letter naming) use: the first named one.
    pub fn primary_topic(&self) -> Option<&str> {
        self.topic
            .iter()
            .chain(&self.topics)
            .map(|t| t.value.as_str())
            .next()
    }

    /// `tenant/namespace` a topic pattern is matched in.
    pub fn pattern_namespace(&self) -> Option<String> {
        let pattern = &self.topic_pattern.as_ref()?.value;
        let rest = pattern.strip_prefix("persistent://")?;
        let mut parts = rest.splitn(3, '/');
        let (tenant, namespace) = (parts.next()?, parts.next()?);
        parts.next()?;
        let literal =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || "-_".contains(c));
        (literal(tenant) && literal(namespace)).then(|| format!("{tenant}/{namespace}"))
    }

    /// The dead-letter topic for this source: configured, else beside the first named topic,
    /// else `<subscription>-DLQ` in the pattern's namespace.
    pub fn dead_letter_topic(&self) -> String {
        if let Some(topic) = &self.dead_letter_topic {
            return topic.clone();
        }
        match (self.primary_topic(), self.pattern_namespace()) {
            (Some(topic), _) => format!("{topic}-{}-DLQ", self.subscription.value),
            (None, Some(namespace)) => {
                format!("persistent://{namespace}/{}-DLQ", self.subscription.value)
            }
            (None, None) => format!("{}-DLQ", self.subscription.value),
        }
    }

    /// The subscription that keeps dead letters on the dead-letter topic.
    pub fn dead_letter_subscription(&self) -> &str {
        self.dead_letter_subscription
            .as_ref()
            .unwrap_or(&self.subscription)
            .value
            .as_str()
    }

    /// A label for logs and errors: the topics, or the pattern.
    pub fn describe_topics(&self) -> String {
        match &self.topic_pattern {
            Some(pattern) => format!("pattern {}", pattern.value),
            None => self.named_topics().join(","),
        }
    }
}

fn is_full_topic_name(topic: &str) -> bool {
    super::TopicName::parse(topic).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(yaml: &str) -> PulsarSourceConfig {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn dead_letters_are_kept_by_the_pipelines_subscription_unless_named() {
        let default = source("topic: persistent://public/default/t\nsubscription: s\n");
        assert_eq!(
            default.dead_letter_topic(),
            "persistent://public/default/t-s-DLQ"
        );
        assert_eq!(default.dead_letter_subscription(), "s");
        assert!(default.check(Path::new("p.yaml")).is_empty());

        let named = source(
            "topic: persistent://public/default/t\nsubscription: s\ndead_letter_subscription: triage\n",
        );
        assert_eq!(named.dead_letter_subscription(), "triage");

        let empty = source(
            "topic: persistent://public/default/t\nsubscription: s\ndead_letter_subscription: ' '\n",
        );
        let issues = empty.check(Path::new("p.yaml"));
        assert_eq!(
            issues[0].key.as_deref(),
            Some("source.dead_letter_subscription")
        );
        assert_eq!(issues[0].line, Some(3), "{}", issues[0]);
    }
}
