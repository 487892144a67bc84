//! Pipelined, latest-wins writes to Redis with reconnect and backoff.

use async_trait::async_trait;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use redis::{Cmd, Script};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::calls::ScriptCalls;
use super::feast::FeastLayout;
use super::layout::{Layout, NativeLayout};
use super::ties::RowTies;
use super::{LayoutKind, RedisClient, RedisConnection};
use super::{RedisServiceConfig, RedisSinkConfig};
use crate::record::{RowBatch, RowLayout};
use crate::retry::Backoff;
use crate::sink::{Sink, SinkError};
use crate::source::MessagePosition;

/// Latest-wins for many entities in one call, atomic per entity, so replicas and
/// out-of-order events cannot overwrite newer values. KEYS: the entity keys. ARGV[1] TTL ms
/// (> 0 expire, 0 persist an entity written before, < 0 leave); ARGV[2] time field; ARGV[3]
/// its encoding (`ms` text or `pbts` protobuf Timestamp), followed by `:<tie field>` when
/// ties are broken; ARGV[4] the number n of the call's fields, then their n names; then per
/// key: event time ms, the time field's new value, the tie value (only when ties are
/// broken), number of field/value pairs s, number of fields to delete d, then s pairs (or,
/// when s is -1, the values of the call's n fields in order) and d fields. At an equal event
/// time the later write wins; when ties are broken, only if its tie value is not below the
/// stored one (byte order; an entity without one loses the tie). Returns how many entities
/// were written (the rest held newer values).
pub(super) const LATEST_WINS_LUA: &str = r"
local function bytes_below(x, y)
  for i = 1, math.min(#x, #y) do
    local p, q = x:byte(i), y:byte(i)
    if p ~= q then return p < q end
  end
  return #x < #y
end
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
local ttl, time_field, mode = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local tie_field, head = nil, 2
local colon = string.find(mode, ':', 1, true)
if colon then tie_field, head, mode = string.sub(mode, colon + 1), 4, string.sub(mode, 1, colon - 1) end
local pbts, n = mode == 'pbts', tonumber(ARGV[4])
local common = {time_field, false}
if tie_field then common[3], common[4] = tie_field, false end
for i = 1, n do common[head - 1 + 2 * i] = ARGV[4 + i] end
local a, written = 5 + n, 0
for k = 1, #KEYS do
  local key, at, tie, c = KEYS[k], tonumber(ARGV[a]), nil, a + 2
  if tie_field then tie, c = ARGV[a + 2], a + 3 end
  local sets, deletes = tonumber(ARGV[c]), tonumber(ARGV[c + 1])
  local first_set = c + 2
  local first_delete = first_set + (sets < 0 and n or 2 * sets)
  local stored, newer = redis.call('HGET', key, time_field), false
  if stored then
    local stored_ms
    if pbts then stored_ms = pbts_ms(stored) else stored_ms = tonumber(stored) end
    newer = stored_ms ~= nil and stored_ms > at
    if tie and stored_ms == at then
      local stored_tie = redis.call('HGET', key, tie_field)
      newer = stored_tie and bytes_below(tie, stored_tie) or false
    end
  end
  if not newer then
    if sets < 0 then
      common[2], common[4] = ARGV[a + 1], tie
      for i = 1, n do common[head + 2 * i] = ARGV[first_set + i - 1] end
      redis.call('HSET', key, unpack(common))
    elseif tie then
      redis.call('HSET', key, time_field, ARGV[a + 1], tie_field, tie, unpack(ARGV, first_set, first_delete - 1))
    else
      redis.call('HSET', key, time_field, ARGV[a + 1], unpack(ARGV, first_set, first_delete - 1))
    end
    if deletes > 0 then redis.call('HDEL', key, unpack(ARGV, first_delete, first_delete + deletes - 1)) end
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) elseif ttl == 0 and stored then redis.call('PERSIST', key) end
    written = written + 1
  end
  a = first_delete + deletes
end
return written
";

/// Connection, script and retry policy for one batch write; cloned into each in-flight task.
#[derive(Clone)]
struct Writer {
    client: RedisClient,
    connection: Option<RedisConnection>,
    script: Script,
    cancel: CancellationToken,
}

impl Writer {
    async fn connection(&mut self) -> Result<RedisConnection, redis::RedisError> {
        if let Some(connection) = &self.connection {
            return Ok(connection.clone());
        }
        let connection = self.client.connect().await?;
        self.connection = Some(connection.clone());
        Ok(connection)
    }

    /// Writes `calls` until Redis takes them (backing off while it is down) or shutdown.
    async fn write_until_done(
        mut self,
        calls: Vec<Cmd>,
        positions: Vec<MessagePosition>,
    ) -> Result<Vec<MessagePosition>, SinkError> {
        let mut backoff = Backoff::default();
        while !calls.is_empty() {
            let attempt = match self.connection().await {
                Ok(mut connection) => connection.invoke_all(&self.script, &calls).await,
                Err(e) => Err(e),
            };
            match attempt {
                Ok(()) => break,
                Err(e) => {
                    self.connection = None;
                    tracing::debug!(entities = calls.len(), "Redis write failed");
                    backoff
                        .wait(&self.cancel, "Redis write failed; nothing acknowledged", &e)
                        .await
                        .map_err(|_| SinkError::Cancelled("Redis was unreachable".into()))?;
                }
            }
        }
        Ok(positions)
    }
}

/// Rows of queued batches written as one batch when Redis falls behind (a catch-up, a
/// burst): in a catch-up of the benchmark's 1M events (`bench/drain.py`) it made 309-323k
/// writes instead of 391-396k. An idle queue merges nothing, so it adds no latency to a sink
/// that keeps up.
const MERGE_QUEUED_ROWS: usize = 8_000;

/// Writes each batch's newest value per entity in one pipelined round trip, with up to
/// `max_in_flight_batches` batches under way; acknowledges them in order.
pub struct RedisSink {
    writer: Writer,
    layout: Layout,
    time_field: Vec<u8>,
    /// Where tie values go when a geo-replicated namespace breaks ties (see [`super::ties`]).
    tie_field: Option<Vec<u8>>,
    ttl_ms: i64,
    in_flight: FuturesOrdered<JoinHandle<Result<Vec<MessagePosition>, SinkError>>>,
    max_in_flight: usize,
}

impl RedisSink {
    /// Connects (once, to fail fast on a wrong URL or password) and prepares the script.
    /// `tie_break`: break ties between equal event times by publish time and origin cluster
    /// (a geo-replicated namespace, where regions receive events in different orders).
    pub async fn connect(
        service: &RedisServiceConfig,
        config: &RedisSinkConfig,
        (view, rows): (&str, RowLayout),
        tie_break: bool,
        cancel: CancellationToken,
    ) -> Result<Self, SinkError> {
        let client =
            RedisClient::open(service).map_err(|e| SinkError::fatal_from("Redis client", e))?;
        let layout = match config.layout {
            LayoutKind::Native => Layout::Native(NativeLayout::new(&config.key_prefix, view, rows)),
            LayoutKind::Feast => Layout::Feast(FeastLayout::new(
                config.feast_project.as_deref().unwrap_or(view),
                view,
                rows,
            )),
        };
        let mut writer = Writer {
            client,
            connection: None,
            script: Script::new(LATEST_WINS_LUA),
            cancel,
        };
        match writer.connection().await {
            Ok(_) => {}
            // A refused login will not fix itself: say so at start instead of retrying.
            Err(e) if is_auth_error(&e) => {
                return Err(SinkError::fatal_from("Redis refused the login", e))
            }
            Err(e) => tracing::warn!(error = %e, "Redis is not reachable yet; writes will retry"),
        }
        Ok(Self {
            writer,
            time_field: layout.time_field(),
            tie_field: tie_break.then(|| layout.tie_field()),
            // A Feast hash may hold other views with their own expiry: leave it alone.
            ttl_ms: match (config.ttl, &layout) {
                (Some(t), _) => i64::try_from(t.as_millis()).unwrap_or(i64::MAX),
                (None, Layout::Feast(_)) => -1,
                (None, Layout::Native(_)) => 0,
            },
            layout,
            in_flight: FuturesOrdered::new(),
            max_in_flight: config.max_in_flight_batches.max(1),
        })
    }

    /// The latest-wins script calls that write `batch`'s newest value per entity.
    fn calls(&self, batch: &RowBatch) -> Result<Vec<Cmd>, SinkError> {
        let mut calls = ScriptCalls::new(
            &self.writer.script,
            self.ttl_ms,
            (&self.time_field, self.layout.time_encoding().script_name()),
            self.tie_field.as_deref(),
            self.writer.client.is_cluster(),
        );
        let ties = self.tie_field.is_some().then(|| RowTies::of(batch));
        self.layout
            .write_entities(&batch.rows, ties.as_ref(), &mut calls)
            .map_err(|e| SinkError::fatal_from("building Redis writes", e))?;
        Ok(calls.into_commands())
    }

    /// Collects finished batches (all when `wait_all`), oldest first, stopping at the
    /// first unfinished one so acknowledgements stay in order.
    async fn collect(&mut self, keep_at_most: usize) -> Result<Vec<MessagePosition>, SinkError> {
        let mut durable = Vec::new();
        while self.in_flight.len() > keep_at_most {
            durable.extend(joined(self.in_flight.next().await)?);
        }
        while let Some(ready) = self.in_flight.next().now_or_never() {
            durable.extend(joined(ready)?);
            if self.in_flight.is_empty() {
                break;
            }
        }
        Ok(durable)
    }
}

fn joined(
    outcome: Option<Result<Result<Vec<MessagePosition>, SinkError>, tokio::task::JoinError>>,
) -> Result<Vec<MessagePosition>, SinkError> {
    match outcome {
        None => Ok(Vec::new()),
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(SinkError::fatal_from("Redis write task failed", e)),
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

    fn reports_freshness(&self) -> bool {
        true
    }

    fn merge_queued_rows(&self) -> usize {
        MERGE_QUEUED_ROWS
    }

    async fn write(&mut self, batch: RowBatch) -> Result<Vec<MessagePosition>, SinkError> {
        let calls = self.calls(&batch)?;
        let writer = self.writer.clone();
        self.in_flight.push_back(tokio::spawn(
            writer.write_until_done(calls, batch.positions),
        ));
        self.collect(self.max_in_flight - 1).await
    }

    async fn tick(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        self.collect(usize::MAX).await
    }

    async fn flush(&mut self) -> Result<Vec<MessagePosition>, SinkError> {
        self.collect(0).await
    }
}
