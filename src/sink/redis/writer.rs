//! Pipelined, latest-wins writes to Redis with reconnect and backoff.

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Script};
use tokio_util::sync::CancellationToken;

use super::layout::{EntityWrite, NativeLayout, EVENT_TIME_FIELD};
use super::{OnlineSinkConfig, RedisServiceConfig};
use crate::record::{RowBatch, RowLayout};
use crate::retry::Backoff;
use crate::sink::{Sink, SinkError};
use crate::source::MessagePosition;

/// Atomic per entity, so replicas and out-of-order events cannot overwrite newer values:
/// KEYS[1] entity key; ARGV[1] event time ms; ARGV[2] TTL ms (0 = none); ARGV[3] number of
/// field/value pairs n; then n pairs to set; then fields to delete.
const LATEST_WINS_LUA: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[4])
if stored and tonumber(stored) > tonumber(ARGV[1]) then return 0 end
local n = tonumber(ARGV[3])
local args = {ARGV[4], ARGV[1]}
for i = 5, 4 + 2 * n do args[#args + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(args))
for i = 5 + 2 * n, #ARGV do redis.call('HDEL', KEYS[1], ARGV[i]) end
local ttl = tonumber(ARGV[2])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) else redis.call('PERSIST', KEYS[1]) end
return 1
";

/// Writes each batch's newest value per entity in one pipelined round trip.
pub struct RedisSink {
    client: Client,
    connection: Option<MultiplexedConnection>,
    connection_config: AsyncConnectionConfig,
    layout: NativeLayout,
    ttl_ms: u64,
    script: Script,
    cancel: CancellationToken,
}

impl RedisSink {
    /// Connects (once, to fail fast on a wrong URL or password) and prepares the script.
    pub async fn connect(
        service: &RedisServiceConfig,
        config: &OnlineSinkConfig,
        view: &str,
        rows: RowLayout,
        cancel: CancellationToken,
    ) -> Result<Self, SinkError> {
        let client = Client::open(service.url.as_str())
            .map_err(|e| SinkError::Fatal(format!("invalid Redis URL: {e}")))?;
        let connection_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(service.response_timeout));
        let mut sink = Self {
            client,
            connection: None,
            connection_config,
            layout: NativeLayout::new(&config.key_prefix, view, rows),
            ttl_ms: config
                .ttl
                .map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            script: Script::new(LATEST_WINS_LUA),
            cancel,
        };
        match sink.connection().await {
            Ok(_) => Ok(sink),
            // A refused login will not fix itself: say so at start instead of retrying.
            Err(e) if is_auth_error(&e) => {
                Err(SinkError::Fatal(format!("Redis refused the login: {e}")))
            }
            Err(e) => {
                tracing::warn!(error = %e, "Redis is not reachable yet; writes will retry");
                Ok(sink)
            }
        }
    }

    async fn connection(&mut self) -> Result<MultiplexedConnection, redis::RedisError> {
        if let Some(connection) = &self.connection {
            return Ok(connection.clone());
        }
        let connection = self
            .client
            .get_multiplexed_async_connection_with_config(&self.connection_config)
            .await?;
        self.connection = Some(connection.clone());
        Ok(connection)
    }

    async fn write_once(&mut self, writes: &[EntityWrite]) -> Result<(), redis::RedisError> {
        let mut connection = self.connection().await?;
        let mut pipe = redis::pipe();
        // Loading in the same pipeline survives a Redis restart that emptied its script cache.
        pipe.load_script(&self.script).ignore();
        for write in writes {
            let mut invocation = self.script.key(&write.key);
            invocation
                .arg(write.event_time_ms)
                .arg(self.ttl_ms)
                .arg(write.set.len())
                .arg(EVENT_TIME_FIELD);
            for (field, value) in &write.set {
                invocation.arg(field).arg(value.as_slice());
            }
            for field in &write.delete {
                invocation.arg(field);
            }
            pipe.invoke_script(&invocation).ignore();
        }
        let result: Result<(), redis::RedisError> = pipe.query_async(&mut connection).await;
        if result.is_err() {
            self.connection = None;
        }
        result
    }
}

fn is_auth_error(e: &redis::RedisError) -> bool {
    matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
        || e.code().is_some_and(|c| c == "WRONGPASS" || c == "NOAUTH")
}

#[async_trait]
impl Sink for RedisSink {
    fn kind(&self) -> &'static str {
        "online"
    }

    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        let writes = self
            .layout
            .entity_writes(&batch.rows)
            .map_err(|e| SinkError::Fatal(format!("building Redis writes: {e}")))?;
        let mut backoff = Backoff::default();
        while !writes.is_empty() {
            match self.write_once(&writes).await {
                Ok(()) => break,
                Err(e) => {
                    let wait = backoff.next_delay();
                    tracing::warn!(error = %e, entities = writes.len(), retry_in = ?wait, attempt = backoff.attempts(), "Redis write failed; nothing acknowledged, retrying");
                    tokio::select! {
                        () = self.cancel.cancelled() => {
                            return Err(SinkError::Cancelled("Redis was unreachable".into()));
                        }
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        Ok(batch.positions)
    }

    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        Ok(Vec::new())
    }

    async fn flush(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        Ok(Vec::new())
    }
}
