//! Turns a pipeline's `online:` section into a running Redis sink.

use async_trait::async_trait;

use super::{RedisClient, RedisProbe, RedisServiceConfig, RedisSink, RedisSinkConfig};
use crate::sink::{Sink, SinkBuilder, SinkContext, SinkError};

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
