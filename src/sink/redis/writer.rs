//! Pipelined, latest-wins writes to Redis with reconnect and backoff.

use async_trait::async_trait;
use redis::Script;
use tokio_util::sync::CancellationToken;

use super::feast::FeastLayout;
use super::layout::{EntityWrite, Layout, NativeLayout};
use super::{LayoutKind, RedisClient, RedisConnection};
use super::{OnlineSinkConfig, RedisServiceConfig};
use crate::record::{RowBatch, RowLayout};
use crate::retry::Backoff;
use crate::sink::{Sink, SinkError};
use crate::source::MessagePosition;

/// Atomic per entity, so replicas and out-of-order events cannot overwrite newer values:
/// KEYS[1] entity key; ARGV[1] event time ms; ARGV[2] TTL ms (> 0 expire, 0 persist, < 0 leave);
/// ARGV[3] time field; ARGV[4] its encoding (`ms` text or `pbts` protobuf Timestamp);
/// ARGV[5] its new value; ARGV[6] number of field/value pairs n; n pairs; fields to delete.
const LATEST_WINS_LUA: &str = r"
local function pbts_ms(s)
  local i, seconds, nanos = 1, 0, 0
  while i <= #s do
    local tag = s:byte(i); i = i + 1
    local v, mul, b = 0, 1, 128
    while b >= 128 and i <= #s do b = s:byte(i); i = i + 1; v = v + (b % 128) * mul; mul = mul * 128 end
    if tag == 8 then seconds = v elseif tag == 16 then nanos = v end
  end
  return seconds * 1000 + math.floor(nanos / 1000000)
end
local stored = redis.call('HGET', KEYS[1], ARGV[3])
if stored then
  local stored_ms
  if ARGV[4] == 'pbts' then stored_ms = pbts_ms(stored) else stored_ms = tonumber(stored) end
  if stored_ms and stored_ms > tonumber(ARGV[1]) then return 0 end
end
local n = tonumber(ARGV[6])
local args = {ARGV[3], ARGV[5]}
for i = 7, 6 + 2 * n do args[#args + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(args))
for i = 7 + 2 * n, #ARGV do redis.call('HDEL', KEYS[1], ARGV[i]) end
local ttl = tonumber(ARGV[2])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) elseif ttl == 0 then redis.call('PERSIST', KEYS[1]) end
return 1
";

/// Writes each batch's newest value per entity in one pipelined round trip.
pub struct RedisSink {
    client: RedisClient,
    connection: Option<RedisConnection>,
    layout: Layout,
    time_field: Vec<u8>,
    ttl_ms: i64,
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
        let client = RedisClient::open(service).map_err(SinkError::Fatal)?;
        let layout = match config.layout {
            LayoutKind::Native => Layout::Native(NativeLayout::new(&config.key_prefix, view, rows)),
            LayoutKind::Feast => Layout::Feast(FeastLayout::new(
                config.feast_project.as_deref().unwrap_or(view),
                view,
                rows,
            )),
        };
        let mut sink = Self {
            client,
            connection: None,
            time_field: layout.time_field(),
            // A Feast hash may hold other views with their own expiry: leave it alone.
            ttl_ms: match (config.ttl, &layout) {
                (Some(t), _) => i64::try_from(t.as_millis()).unwrap_or(i64::MAX),
                (None, Layout::Feast(_)) => -1,
                (None, Layout::Native(_)) => 0,
            },
            layout,
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

    async fn connection(&mut self) -> Result<RedisConnection, redis::RedisError> {
        if let Some(connection) = &self.connection {
            return Ok(connection.clone());
        }
        let connection = self.client.connect().await?;
        self.connection = Some(connection.clone());
        Ok(connection)
    }

    async fn write_once(&mut self, writes: &[EntityWrite]) -> Result<(), redis::RedisError> {
        let mut connection = self.connection().await?;
        let time_encoding = self
            .layout
            .time_encoding()
            .script_name()
            .as_bytes()
            .to_vec();
        let calls = writes
            .iter()
            .map(|write| {
                let mut args = Vec::with_capacity(6 + 2 * write.set.len() + write.delete.len());
                args.push(write.event_time_ms.to_string().into_bytes());
                args.push(self.ttl_ms.to_string().into_bytes());
                args.push(self.time_field.clone());
                args.push(time_encoding.clone());
                args.push(self.layout.time_value(write.event_time_ms));
                args.push(write.set.len().to_string().into_bytes());
                for (field, value) in &write.set {
                    args.push(field.clone());
                    args.push(value.clone());
                }
                args.extend(write.delete.iter().cloned());
                (write.key.clone(), args)
            })
            .collect();
        let result = connection.invoke_all(&self.script, calls).await;
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
