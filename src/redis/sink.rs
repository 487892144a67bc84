//! How the Redis online sink plugs into the runtime: the pipeline file's `online:` section
//! ([`RedisSinkConfig`]) with its checks, and the builder of the running sink.

use std::path::Path;

use async_trait::async_trait;

use super::{
    feast_supports, LayoutKind, RedisClient, RedisProbe, RedisServiceConfig, RedisSink,
    RedisSinkConfig,
};
use crate::sink::{PipelineShape, Sink, SinkBuilder, SinkContext, SinkError, SinkSection};
use crate::yaml::ConfigIssue;

impl SinkSection for RedisSinkConfig {
    type Service = RedisServiceConfig;

    fn enabled(&self) -> bool {
        self.enabled
    }

    fn check(&self, pipeline: &PipelineShape<'_>) -> Vec<ConfigIssue> {
        let file = pipeline.file;
        let mut issues = Vec::new();
        if self.key_prefix.is_empty() || self.key_prefix.contains(char::is_whitespace) {
            issues.push(ConfigIssue::at_key(
                file,
                "online.key_prefix",
                "must be non-empty and without spaces",
            ));
        }
        if self.layout == LayoutKind::Feast
            && self.feast_project.as_deref().is_none_or(str::is_empty)
        {
            issues.push(ConfigIssue::at_key(
                file,
                "online.feast_project",
                "the feast layout needs the Feast project name",
            ));
        }
        if self.ttl.is_some_and(|t| t.as_millis() == 0) {
            issues.push(ConfigIssue::at_key(
                file,
                "online.ttl",
                "must be positive; leave it out for no expiry",
            ));
        }
        if let (LayoutKind::Feast, Some(types)) = (self.layout, pipeline.types) {
            let features = types
                .iter()
                .filter(|(name, _)| pipeline.features.contains(name));
            for (name, data_type) in features {
                if !feast_supports(data_type) {
                    issues.push(ConfigIssue::at_key(
                        file,
                        "online.layout",
                        format!("feature `{name}` of type {data_type} has no Feast value type"),
                    ));
                }
            }
        }
        issues
    }

    fn builder(&self, service: &RedisServiceConfig) -> Box<dyn SinkBuilder> {
        Box::new(RedisSinkBuilder {
            service: service.clone(),
            config: self.clone(),
        })
    }
}

/// Native-layout pipelines (`(name, file, section)`) whose keys `{prefix}:{pipeline}:{entity}`
/// could be the same Redis keys (one key space starting with the other, e.g. prefix `fc:a` +
/// pipeline `b` and prefix `fc` + pipeline `a` with an entity `b:…`): each would overwrite
/// the other.
pub fn overlapping_key_spaces(pipelines: &[(&str, &Path, &RedisSinkConfig)]) -> Vec<ConfigIssue> {
    let spaces: Vec<(&str, &Path, String)> = pipelines
        .iter()
        .filter(|(_, _, online)| online.layout == LayoutKind::Native)
        .map(|(name, file, online)| (*name, *file, format!("{}:{name}:", online.key_prefix)))
        .collect();
    let mut issues = Vec::new();
    for (i, (a, a_file, space_a)) in spaces.iter().enumerate() {
        for (b, b_file, space_b) in &spaces[i + 1..] {
            if space_a.starts_with(space_b.as_str()) || space_b.starts_with(space_a.as_str()) {
                let message = format!(
                    "pipeline `{b}` writes Redis keys `{space_b}…`, which overlap `{space_a}…` of pipeline `{a}` ({}); give one a distinct key_prefix",
                    a_file.display()
                );
                issues.push(ConfigIssue::at_key(b_file, "online.key_prefix", message));
            }
        }
    }
    issues
}

/// The online sink of one pipeline, with the service's Redis settings.
#[derive(Debug, Clone)]
pub struct RedisSinkBuilder {
    /// Where Redis is and how to log in.
    pub service: RedisServiceConfig,
    /// The pipeline's `online:` section.
    pub config: RedisSinkConfig,
}

#[async_trait]
impl SinkBuilder for RedisSinkBuilder {
    fn kind(&self) -> &'static str {
        "online"
    }

    async fn build(&self, context: &SinkContext) -> Result<Box<dyn Sink>, SinkError> {
        let sink = RedisSink::connect(
            &self.service,
            &self.config,
            (&context.pipeline, context.rows.clone()),
            context.tie_break,
            context.cancel.clone(),
        )
        .await?;
        let client = RedisClient::open(&self.service)
            .map_err(|e| SinkError::fatal_from("Redis client", e))?;
        context
            .health
            .add_probe(std::sync::Arc::new(RedisProbe { client }));
        Ok(Box::new(sink))
    }
}
