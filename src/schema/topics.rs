//! One decoder per topic: a pipeline reading several topics (a list, a pattern, or the
//! partitions of one topic) resolves each message against its own topic's writer schemas,
//! because schema version numbers are per topic.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use super::{DecodeError, Decoded, PayloadDecoder};
use crate::pulsar::{partitioned_topic, stream_topic};
use crate::source::SourceMessage;

/// Decoders by topic (partitions share their topic's schemas), created on first sight.
#[derive(Clone)]
pub struct TopicDecoders {
    template: PayloadDecoder,
    by_topic: HashMap<String, PayloadDecoder>,
}

/// `persistent://t/n/x-partition-3` → `persistent://t/n/x`: partitions share one schema.
pub fn schema_topic(topic: &str) -> &str {
    partitioned_topic(stream_topic(topic))
}

/// The schema topic of each message's stream, worked out once per run of messages of one
/// stream: streams share one name per stream, so a pointer compare finds the run, where
/// parsing the name cost three string searches per message.
#[derive(Default)]
struct SchemaTopics<'a> {
    last: Option<(&'a Arc<str>, &'a str)>,
}

impl<'a> SchemaTopics<'a> {
    fn of(&mut self, stream: &'a Arc<str>) -> &'a str {
        match self.last {
            Some((known, topic)) if Arc::ptr_eq(known, stream) => topic,
            _ => {
                let topic = schema_topic(stream);
                self.last = Some((stream, topic));
                topic
            }
        }
    }
}

impl TopicDecoders {
    /// Decoders derived from `template`, plus those already checked at start (`checked`).
    pub fn new(template: PayloadDecoder, checked: Vec<PayloadDecoder>) -> Self {
        let by_topic = checked
            .into_iter()
            .map(|decoder| (decoder.topic().to_string(), decoder))
            .collect();
        Self { template, by_topic }
    }

    /// The Arrow schema of every topic's rows.
    pub fn output_schema(&self) -> SchemaRef {
        self.template.output_schema()
    }

    /// The event-time column.
    pub fn event_time(&self) -> &str {
        self.template.event_time()
    }

    /// Decodes `messages`, each with its topic's decoder; rows and failures index `messages`.
    pub async fn decode(&mut self, messages: &[SourceMessage]) -> Result<Decoded, DecodeError> {
        let mut topics = SchemaTopics::default();
        let first = messages.first().map(|m| topics.of(&m.position.topic));
        if messages
            .iter()
            .all(|m| Some(topics.of(&m.position.topic)) == first)
        {
            return self
                .decoder(first.unwrap_or_default())
                .decode(messages)
                .await;
        }
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (index, message) in messages.iter().enumerate() {
            let topic = topics.of(&message.position.topic);
            match groups.iter_mut().find(|(t, _)| t == topic) {
                Some((_, indices)) => indices.push(index),
                None => groups.push((topic.to_string(), vec![index])),
            }
        }
        let mut batches = Vec::with_capacity(groups.len());
        let mut row_messages = Vec::with_capacity(messages.len());
        let mut failures = Vec::new();
        for (topic, indices) in groups {
            let group: Vec<SourceMessage> = indices.iter().map(|&i| messages[i].clone()).collect();
            let decoded = self.decoder(&topic).decode(&group).await?;
            row_messages.extend(decoded.row_messages.iter().map(|&local| indices[local]));
            failures.extend(decoded.failures.into_iter().map(|mut failure| {
                failure.index = indices[failure.index];
                failure
            }));
            batches.push(decoded.rows);
        }
        failures.sort_by_key(|f| f.index);
        let rows = arrow::compute::concat_batches(&self.template.output_schema(), &batches)?;
        Ok(Decoded {
            rows,
            row_messages,
            failures,
        })
    }

    fn decoder(&mut self, topic: &str) -> &mut PayloadDecoder {
        let template = &self.template;
        self.by_topic
            .entry(topic.to_string())
            .or_insert_with(|| template.for_topic(topic))
    }
}

#[cfg(test)]
mod tests {
    use super::schema_topic;

    #[test]
    fn partitions_share_their_topics_schema() {
        assert_eq!(
            schema_topic("persistent://t/n/x-partition-3"),
            "persistent://t/n/x"
        );
        assert_eq!(schema_topic("persistent://t/n/x"), "persistent://t/n/x");
        assert_eq!(
            schema_topic("persistent://t/n/x-partition-"),
            "persistent://t/n/x-partition-"
        );
        assert_eq!(
            schema_topic("persistent://t/n/my-partition-key"),
            "persistent://t/n/my-partition-key"
        );
    }
}
