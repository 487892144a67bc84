//! The online store's readiness check.

use async_trait::async_trait;

use super::RedisClient;
use crate::health::Probe;

/// Redis answers `PING` (every node of a cluster is reached through the client).
pub struct RedisProbe {
    /// The client the online sinks use.
    pub client: RedisClient,
}

#[async_trait]
impl Probe for RedisProbe {
    fn name(&self) -> String {
        "redis".into()
    }

    async fn check(&self) -> Result<(), String> {
        let mut connection = self.client.connect().await.map_err(|e| e.to_string())?;
        connection
            .query_all::<String>(vec![redis::cmd("PING")])
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
