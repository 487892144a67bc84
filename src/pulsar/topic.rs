//! Pulsar topic names: `persistent://tenant/namespace/topic[-partition-N]`, parsed once.

/// A full topic name split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicName<'a> {
    /// `persistent` or `non-persistent`.
    pub domain: &'a str,
    /// Tenant.
    pub tenant: &'a str,
    /// Namespace within the tenant.
    pub namespace: &'a str,
    /// The topic's own name, without a partition suffix.
    pub local: &'a str,
    /// The partition, for one partition of a partitioned topic.
    pub partition: Option<u32>,
}

/// The name is not `persistent://tenant/namespace/topic`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topic `{0}` is not of the form persistent://tenant/namespace/topic")]
pub struct BadTopicName(pub String);

impl<'a> TopicName<'a> {
    /// Parses a full topic (or partition) name.
    pub fn parse(full: &'a str) -> Result<Self, BadTopicName> {
        let bad = || BadTopicName(full.to_string());
        let (domain, rest) = full.split_once("://").ok_or_else(bad)?;
        if domain != "persistent" && domain != "non-persistent" {
            return Err(bad());
        }
        let mut parts = rest.splitn(3, '/');
        let (Some(tenant), Some(namespace), Some(topic)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        if [tenant, namespace, topic]
            .iter()
            .any(|part| part.is_empty() || part.contains('/'))
        {
            return Err(bad());
        }
        let (local, partition) = split_partition(topic);
        Ok(Self {
            domain,
            tenant,
            namespace,
            local,
            partition,
        })
    }

    /// `tenant/namespace`.
    pub fn namespace_path(&self) -> String {
        format!("{}/{}", self.tenant, self.namespace)
    }

    /// `tenant/namespace/topic` of the whole topic (partitions share one schema).
    pub fn topic_path(&self) -> String {
        format!("{}/{}/{}", self.tenant, self.namespace, self.local)
    }

    /// `domain/tenant/namespace/topic[-partition-N]`: this topic or partition in admin v2
    /// URLs (`/admin/v2/persistent/…/stats`).
    pub fn admin_path(&self) -> String {
        match self.partition {
            Some(index) => format!("{}/{}-partition-{index}", self.domain, self.topic_path()),
            None => format!("{}/{}", self.domain, self.topic_path()),
        }
    }
}

/// `x-partition-3` → (`x`, Some(3)); any other name is its own base.
fn split_partition(topic: &str) -> (&str, Option<u32>) {
    match topic.rsplit_once("-partition-") {
        Some((base, index)) if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) => {
            index.parse().map_or((topic, None), |n| (base, Some(n)))
        }
        _ => (topic, None),
    }
}

/// The topic a partition belongs to (`persistent://t/n/x-partition-3` → `persistent://t/n/x`);
/// any other name is returned as it is.
pub fn partitioned_topic(name: &str) -> &str {
    let (base, partition) = split_partition(name);
    if partition.is_some() {
        base
    } else {
        name
    }
}

/// The topic partition a stream name stands for: in a replicated namespace streams are
/// named `<cluster>/<topic partition>` (see `replication`), otherwise by the topic itself.
pub fn stream_topic(stream: &str) -> &str {
    // A stream without a cluster is its topic: no search (this runs per acknowledgement).
    if stream.starts_with("persistent://") || stream.starts_with("non-persistent://") {
        return stream;
    }
    for scheme in ["non-persistent://", "persistent://"] {
        if let Some(at) = stream.find(scheme) {
            return &stream[at..];
        }
    }
    stream
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_a_partition_name() {
        let name = TopicName::parse("persistent://public/default/f-partition-2").unwrap();
        assert_eq!(name.local, "f");
        assert_eq!(name.partition, Some(2));
        assert_eq!(name.topic_path(), "public/default/f");
        assert_eq!(name.admin_path(), "persistent/public/default/f-partition-2");
        assert_eq!(name.namespace_path(), "public/default");
    }

    #[test]
    fn names_that_only_look_partitioned_stay_whole() {
        for topic in [
            "my-partition-key",
            "x-partition-",
            "x-partition-99999999999",
        ] {
            let full = format!("persistent://t/n/{topic}");
            let name = TopicName::parse(&full).unwrap();
            assert_eq!((name.local, name.partition), (topic, None));
            assert_eq!(partitioned_topic(&full), full);
        }
        assert_eq!(
            partitioned_topic("persistent://t/n/x-partition-3"),
            "persistent://t/n/x"
        );
    }

    #[test]
    fn short_or_foreign_names_are_refused() {
        for bad in [
            "public/default/f",
            "persistent://public/default",
            "persistent://public//f",
            "kafka://a/b/c",
            "persistent://a/b/c/d",
        ] {
            assert!(TopicName::parse(bad).is_err(), "{bad}");
        }
        assert!(TopicName::parse("non-persistent://a/b/c").is_ok());
    }

    #[test]
    fn a_stream_of_a_replicated_namespace_names_its_topic() {
        assert_eq!(
            stream_topic("us-east/persistent://t/n/x-partition-1"),
            "persistent://t/n/x-partition-1"
        );
        assert_eq!(
            stream_topic("eu/non-persistent://t/n/x"),
            "non-persistent://t/n/x"
        );
        assert_eq!(stream_topic("persistent://t/n/x"), "persistent://t/n/x");
    }
}
