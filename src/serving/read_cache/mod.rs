//! The read cache (`serving.cache_entities`): entities whose rows the cache holds are
//! answered from memory, the others read in one round trip (every feature
//! of the view and the key's expiry, so that the row serves any later request) and kept.
//!
//! Only a single Redis server: client tracking belongs to one server connection, and the
//! connection that read a key must be the one that hears of its changes. The cache is
//! emptied whenever that connection is replaced or drops, since what changed meanwhile was
//! told to nobody.

mod rows;

use std::borrow::Cow;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use redis::{PushKind, Value};

pub use rows::CachedRow;
use rows::Rows;

use super::lookup::{Found, Lookup, ViewFields};
use super::query_error::QueryError;
use super::view::FeatureView;
use crate::metrics::{CacheLabels, Metrics};
use crate::redis::{RedisClient, RedisConnection};

/// The read cache: entities' rows, at most a given number of Redis keys, and its counters
/// (`serving_cache_*`).
pub struct ReadCache {
    rows: Arc<Rows>,
    hits: Counter,
    misses: Counter,
}

impl ReadCache {
    /// An empty cache of at most `entities` Redis keys, counting into `metrics`.
    pub fn new(entities: NonZeroUsize, metrics: &Metrics) -> Self {
        let reads = |outcome| {
            metrics
                .serving_cache_reads
                .get_or_create(&CacheLabels { outcome })
                .clone()
        };
        Self {
            rows: Arc::new(Rows::new(
                entities,
                metrics.serving_cache_invalidations.clone(),
            )),
            hits: reads("hit"),
            misses: reads("miss"),
        }
    }

    /// A new tracking connection whose invalidations reach the cache; the cache starts
    /// empty, as nothing read before was tracked by this connection.
    pub async fn connect(&self, client: &RedisClient) -> redis::RedisResult<RedisConnection> {
        let rows = Arc::clone(&self.rows);
        let connection = client
            .connect_tracking(move |push| match push.kind {
                PushKind::Invalidate => match push.data.first() {
                    Some(Value::Array(keys)) => {
                        rows.invalidate(keys.iter().filter_map(|key| match key {
                            Value::BulkString(bytes) => Some(bytes.as_slice()),
                            _ => None,
                        }))
                    }
                    // After FLUSHALL / FLUSHDB Redis names no key.
                    _ => rows.clear(),
                },
                PushKind::Disconnection => rows.clear(),
                _ => {}
            })
            .await?;
        self.rows.clear();
        Ok(connection)
    }
}

/// Where one entity's answer comes from.
enum Source {
    /// The cache.
    Cached(Arc<CachedRow>),
    /// The replies from this index on; with the key and view to keep the row under.
    Read {
        reply: usize,
        keep: Option<(Vec<u8>, u32)>,
    },
}

impl ReadCache {
    /// `FeatureReader::lookup` through the cache, over `connection`, which must be one made
    /// by [`ReadCache::connect`] before this call; `fields_of` gives a view's hash fields
    /// (borrowed for the reader's own views, whose rows the cache keeps).
    pub(super) async fn lookup<'v>(
        &self,
        mut connection: RedisConnection,
        fields_of: impl Fn(&FeatureView) -> Cow<'v, ViewFields>,
        lookups: &[Lookup<'_>],
    ) -> Result<Vec<Vec<Found>>, QueryError> {
        let now = Instant::now();
        let read_at = self.rows.epoch();
        let mut commands = Vec::new();
        let mut sources = Vec::with_capacity(lookups.len());
        let (mut hits, mut misses) = (0, 0);
        for lookup in lookups {
            let view = lookup.view;
            let fields = fields_of(view);
            // Only this reader's own views have rows in the cache.
            let own = matches!(fields, Cow::Borrowed(_));
            let keys = lookup
                .entities
                .iter()
                .map(|entity| view.redis_key(entity))
                .collect::<Result<Vec<_>, _>>()?;
            let cached = if own {
                self.rows
                    .get_all(keys.iter().map(Vec::as_slice), fields.id, now)
            } else {
                vec![None; keys.len()]
            };
            let mut entities = Vec::with_capacity(keys.len());
            for (key, cached) in keys.into_iter().zip(cached) {
                if let Some(row) = cached {
                    hits += 1;
                    entities.push(Source::Cached(row));
                    continue;
                }
                if own {
                    misses += 1;
                }
                let mut command = redis::cmd("HMGET");
                command.arg(&key).arg(&fields.time);
                for feature in &fields.features {
                    command.arg(feature);
                }
                let mut expiry = redis::cmd("PTTL");
                expiry.arg(&key);
                entities.push(Source::Read {
                    reply: commands.len(),
                    keep: own.then(|| (key, fields.id)),
                });
                commands.push(command);
                commands.push(expiry);
            }
            sources.push(entities);
        }
        self.hits.inc_by(hits);
        self.misses.inc_by(misses);
        let replies: Vec<Value> = if commands.is_empty() {
            Vec::new()
        } else {
            connection.query_all(commands).await?
        };
        let mut replies: Vec<Option<Value>> = replies.into_iter().map(Some).collect();
        let mut take = |index: usize| replies.get_mut(index).and_then(Option::take);
        let mut answer = Vec::with_capacity(lookups.len());
        for (lookup, entities) in lookups.iter().zip(sources) {
            let mut found = Vec::with_capacity(entities.len());
            for source in entities {
                let row = match source {
                    Source::Cached(row) => row,
                    Source::Read { reply, keep } => {
                        let row = Arc::new(row(lookup, take(reply), take(reply + 1), now)?);
                        if let Some((key, view)) = keep {
                            self.rows.insert(key, view, Arc::clone(&row), read_at);
                        }
                        row
                    }
                };
                found.push(Found::cached(row));
            }
            answer.push(found);
        }
        Ok(answer)
    }
}

/// The row of an `HMGET` of every feature and the key's `PTTL`.
fn row(
    lookup: &Lookup<'_>,
    fields: Option<Value>,
    ttl: Option<Value>,
    now: Instant,
) -> Result<CachedRow, QueryError> {
    let fields: Vec<Option<Vec<u8>>> =
        redis::from_redis_value(fields.unwrap_or(Value::Nil)).map_err(redis::RedisError::from)?;
    let ttl_ms: i64 = ttl
        .map(redis::from_redis_value)
        .transpose()
        .map_err(redis::RedisError::from)?
        .unwrap_or(-1);
    let mut fields = fields.into_iter();
    let event_time_ms = fields
        .next()
        .flatten()
        .and_then(|raw| lookup.view.event_time(&raw));
    // -1: no expiry; -2: no key (its creation will be pushed as an invalidation).
    let expires = u64::try_from(ttl_ms)
        .ok()
        .map(|ms| now + Duration::from_millis(ms));
    Ok(CachedRow::new(event_time_ms, fields, expires))
}
