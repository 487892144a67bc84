//! Geo-replicated namespaces: a sidecar per region, each reading its own cluster.
//!
//! With `pulsar.replication` set, every stream a message comes from is named
//! `<cluster>/<topic partition>`, so the offline table keeps one position per cluster and
//! partition: the same partition in two clusters has unrelated ledger and entry ids. A
//! message the broker replicated from another cluster (`replicated_from` in its metadata)
//! carries its [`Origin`]: that cluster's stream and, from the replicator's
//! `__MSG_PROP_REPL_SOURCE_POSITION` property, its ledger and entry there. The offline table
//! takes such a copy either never (`offline: own_region`, the origin's sidecar commits it)
//! or under the origin's position (`offline: all_regions`), which is what lets a standby
//! region skip what the active one already committed.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use crate::source::{MessagePosition, OfflineOrigins, Offset, Origin, StreamNames};
use crate::yaml::ConfigIssue;

/// The property the Pulsar replicator sets on a copy: `<ledger>:<entry>` in the origin.
pub const SOURCE_POSITION_PROPERTY: &str = "__MSG_PROP_REPL_SOURCE_POSITION";

/// The service file's `pulsar.replication:` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicationConfig {
    /// This sidecar's Pulsar cluster, as the brokers name it (`clusterName`).
    pub cluster: String,
    /// Which messages' rows the offline table takes.
    #[serde(default)]
    pub offline: OfflineOrigins,
    /// Subscribe with `replicate_subscription_state` (PIP-33), so that a standby region's
    /// sidecar continues from where this one acknowledged (up to one snapshot behind).
    #[serde(default)]
    pub replicated_subscriptions: bool,
}

impl ReplicationConfig {
    /// Problems serde cannot see.
    pub fn check(&self, file: &Path) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let name = self.cluster.trim();
        if name.is_empty() || name != self.cluster || name.contains('/') {
            issues.push(ConfigIssue::at_key(
                file,
                "pulsar.replication.cluster",
                format!(
                    "`{}` is not a cluster name; write the brokers' clusterName (no spaces or `/`)",
                    self.cluster
                ),
            ));
        }
        if self.replicated_subscriptions && self.offline == OfflineOrigins::OwnRegion {
            // Every region's sidecar runs in active/active: a replicated subscription would
            // let one region's acknowledgements move the others' past events their own
            // sidecars have not committed yet.
            issues.push(ConfigIssue::at_key(
                file,
                "pulsar.replication.replicated_subscriptions",
                "replicated subscriptions are for active/standby (`offline: all_regions`, one \
                 sidecar running); with `offline: own_region` every region's sidecar runs and \
                 each would acknowledge the others' events",
            ));
        }
        issues
    }
}

/// Names the streams of received messages and finds the origin of replicated copies.
#[derive(Debug, Default)]
pub struct StreamNaming {
    /// This sidecar's cluster when the namespace is replicated.
    cluster: Option<String>,
    local: StreamNames,
    origins: StreamNames,
}

impl StreamNaming {
    /// Naming for a sidecar configured with `replication` (plain topic names without).
    pub fn new(replication: Option<&ReplicationConfig>) -> Self {
        Self {
            cluster: replication.map(|r| r.cluster.clone()),
            ..Self::default()
        }
    }

    /// The shared stream name of `topic` in this cluster.
    pub fn local(&mut self, topic: &str) -> Arc<str> {
        self.local.in_cluster(self.cluster.as_deref(), topic)
    }

    /// The origin of a copy replicated from `from` (`None` for a message first written here,
    /// or without replication configured).
    pub fn origin(
        &mut self,
        from: Option<&str>,
        topic: &str,
        properties: &[(String, String)],
        local: &MessagePosition,
    ) -> Option<Arc<Origin>> {
        let cluster = from.filter(|c| !c.is_empty() && self.cluster.is_some())?;
        let offset = properties
            .iter()
            .find(|(key, _)| key == SOURCE_POSITION_PROPERTY)
            .and_then(|(_, value)| parse_source_position(value, local.offset.2));
        Some(Arc::new(Origin {
            stream: self.origins.in_cluster(Some(cluster), topic),
            offset,
        }))
    }
}

/// `<ledger>:<entry>` as the replicator writes it, with the copy's index in its batch.
fn parse_source_position(value: &str, batch_index: i32) -> Option<Offset> {
    let (ledger, entry) = value.split_once(':')?;
    Some((
        ledger.trim().parse().ok()?,
        entry.trim().parse().ok()?,
        batch_index,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position(stream: Arc<str>, offset: Offset) -> MessagePosition {
        MessagePosition {
            topic: stream,
            offset,
            entry_size: None,
            origin: None,
        }
    }

    #[test]
    fn streams_are_named_per_cluster_and_copies_know_their_origin() {
        let config = ReplicationConfig {
            cluster: "eu".into(),
            offline: OfflineOrigins::AllRegions,
            replicated_subscriptions: true,
        };
        let mut naming = StreamNaming::new(Some(&config));
        let topic = "persistent://geo/f/t-partition-1";
        let stream = naming.local(topic);
        assert_eq!(stream.as_ref(), "eu/persistent://geo/f/t-partition-1");
        assert!(Arc::ptr_eq(&stream, &naming.local(topic)));
        assert_eq!(super::super::stream_topic(&stream), topic);

        let copy = position(stream.clone(), (40, 7, 2));
        let properties = vec![(SOURCE_POSITION_PROPERTY.to_string(), "12:345".to_string())];
        let origin = naming
            .origin(Some("us"), topic, &properties, &copy)
            .expect("a copy");
        assert_eq!(
            origin.stream.as_ref(),
            "us/persistent://geo/f/t-partition-1"
        );
        assert_eq!(origin.offset, Some((12, 345, 2)));
        assert!(naming.origin(None, topic, &properties, &copy).is_none());
        let unknown = naming
            .origin(Some("us"), topic, &[], &copy)
            .expect("a copy");
        assert_eq!(unknown.offset, None, "an older broker does not say where");
    }

    #[test]
    fn without_replication_names_are_the_topics() {
        let mut naming = StreamNaming::new(None);
        let stream = naming.local("persistent://public/default/t");
        assert_eq!(stream.as_ref(), "persistent://public/default/t");
        let local = position(stream, (1, 1, -1));
        assert!(naming
            .origin(Some("other"), "persistent://public/default/t", &[], &local)
            .is_none());
    }

    #[test]
    fn the_cluster_name_and_the_mode_are_checked() {
        let bad = ReplicationConfig {
            cluster: "us/east".into(),
            offline: OfflineOrigins::OwnRegion,
            replicated_subscriptions: false,
        };
        let issues = bad.check(Path::new("service.yaml"));
        assert_eq!(issues[0].key.as_deref(), Some("pulsar.replication.cluster"));
        let mixed = ReplicationConfig {
            cluster: "eu".into(),
            offline: OfflineOrigins::OwnRegion,
            replicated_subscriptions: true,
        };
        let issues = mixed.check(Path::new("service.yaml"));
        assert_eq!(
            issues[0].key.as_deref(),
            Some("pulsar.replication.replicated_subscriptions")
        );
        assert!(
            issues[0]
                .message
                .contains("(`offline: all_regions`, one sidecar running);"),
            "{}",
            issues[0].message
        );
        assert!(!issues[0].message.contains("  "), "{}", issues[0].message);
    }
}
