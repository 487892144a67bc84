//! Reading online features back: the `get` command, `/v1/features` and Feast's
//! `/get-online-features`. One lookup serves them all: per view, the entities' join key
//! values and the features asked, read with one `HMGET` per entity, every view of a request
//! in one pipelined round trip.

use std::borrow::Cow;
use std::collections::HashMap;

use redis::Cmd;
use serde_json::{json, Map, Value};

use super::aggregated::{aggregated_values, output_json, tile_commands};
use super::lookup::{Found, Lookup, ViewFields};
use super::query_error::QueryError;
use super::read_cache::ReadCache;
use super::values::ValueStyle;
use super::view::FeatureView;
use crate::redis::{RedisClient, RedisConnection, RedisServiceConfig};

/// Reads feature values of online pipelines, in either layout.
pub struct FeatureReader {
    client: RedisClient,
    /// The connection every read shares; dropped when it fails, so that the next read
    /// connects again (Redis restarted, or was down when the reader was made).
    connection: tokio::sync::Mutex<Option<RedisConnection>>,
    views: HashMap<String, FeatureView>,
    /// Per view, its hash fields: worked out once (a Feast field name is a hash).
    fields: HashMap<String, ViewFields>,
    /// Entities' rows kept in memory (`serving.cache_entities`).
    cache: Option<ReadCache>,
}

impl FeatureReader {
    /// A reader for the `views` given that connects on its first read; with `cache`, it
    /// keeps entities' replies in memory until Redis says they changed (one server only:
    /// see `super::read_cache`).
    pub fn new(
        service: &RedisServiceConfig,
        views: impl IntoIterator<Item = FeatureView>,
        cache: Option<ReadCache>,
    ) -> Result<Self, QueryError> {
        let client = match cache {
            Some(_) => RedisClient::open_tracking(service)?,
            None => RedisClient::open(service)?,
        };
        let views: HashMap<String, FeatureView> = views
            .into_iter()
            .map(|view| (view.name.clone(), view))
            .collect();
        let fields = views
            .iter()
            .zip(0..)
            .map(|((name, view), id)| (name.clone(), ViewFields::of(view, id)))
            .collect();
        Ok(Self {
            client,
            connection: tokio::sync::Mutex::new(None),
            views,
            fields,
            cache,
        })
    }

    /// Like [`FeatureReader::new`], connected now (so that a wrong URL or password shows
    /// at once).
    pub async fn connect(
        service: &RedisServiceConfig,
        views: impl IntoIterator<Item = FeatureView>,
    ) -> Result<Self, QueryError> {
        let reader = Self::new(service, views, None)?;
        reader.connection().await?;
        Ok(reader)
    }

    async fn connection(&self) -> Result<RedisConnection, QueryError> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref().filter(|c| !c.has_dropped()) {
            return Ok(connection.clone());
        }
        let connection = match &self.cache {
            Some(cache) => cache.connect(&self.client).await?,
            None => self.client.connect().await?,
        };
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// The online view `name`.
    pub fn view(&self, name: &str) -> Result<&FeatureView, QueryError> {
        self.views
            .get(name)
            .ok_or_else(|| QueryError::UnknownView(name.to_string()))
    }

    /// The fields of `view`: worked out once for this reader's own views (borrowed), now
    /// for another (a caller's own).
    pub(super) fn fields_of<'v>(&'v self, view: &FeatureView) -> Cow<'v, ViewFields> {
        match self.fields.get(&view.name) {
            Some(fields)
                if self
                    .views
                    .get(&view.name)
                    .is_some_and(|v| std::ptr::eq(v, view)) =>
            {
                Cow::Borrowed(fields)
            }
            _ => Cow::Owned(ViewFields::of(view, u32::MAX)),
        }
    }

    /// Forgets the connection after a failure that may have broken it.
    async fn forget_broken(&self, e: &redis::RedisError) {
        if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
            *self.connection.lock().await = None;
        }
    }

    /// Reads every lookup's entities in one round trip, their stored values and the tiles
    /// of the aggregated features asked (merged at this time); through the read cache, the
    /// tiles take a round trip of their own. The answer has one [`Found`] per entity, per
    /// lookup, in order.
    pub async fn lookup(&self, lookups: &[Lookup<'_>]) -> Result<Vec<Vec<Found>>, QueryError> {
        self.lookup_at(lookups, chrono::Utc::now().timestamp_millis())
            .await
    }

    /// [`FeatureReader::lookup`] with the tiles merged at `now` (ms since 1970) rather than
    /// at the time of the read (an audit compares them with the table at one time).
    pub async fn lookup_at(
        &self,
        lookups: &[Lookup<'_>],
        now: i64,
    ) -> Result<Vec<Vec<Found>>, QueryError> {
        let tile_reads = tile_commands(lookups);
        let (mut found, tiles) = match &self.cache {
            Some(cache) => {
                // Connect first: a new connection empties the cache, and its epoch is then
                // the one every read of the lookup is sent at.
                let connection = self.connection().await?;
                let found = cache
                    .lookup(connection, |view| self.fields_of(view), lookups)
                    .await;
                if let Err(QueryError::Redis(e)) = &found {
                    self.forget_broken(e).await;
                }
                let tiles = if tile_reads.is_empty() {
                    Vec::new()
                } else {
                    self.query(tile_reads).await?
                };
                (found?, tiles)
            }
            None => self.lookup_stored(lookups, tile_reads).await?,
        };
        let aggregated = aggregated_values(lookups, tiles, now)?;
        for (rows, values) in found.iter_mut().zip(aggregated) {
            for (row, values) in rows.iter_mut().zip(values) {
                row.set_aggregated(values);
            }
        }
        Ok(found)
    }

    /// Runs `commands` (`HMGET`s) on the shared connection.
    async fn query(&self, commands: Vec<Cmd>) -> Result<Vec<Vec<Option<Vec<u8>>>>, QueryError> {
        let mut connection = self.connection().await?;
        match connection.query_all(commands).await {
            Ok(rows) => Ok(rows),
            Err(e) => {
                self.forget_broken(&e).await;
                Err(e.into())
            }
        }
    }

    /// The stored values of every lookup's entities, and the replies to `tile_reads`, in
    /// one round trip.
    async fn lookup_stored(
        &self,
        lookups: &[Lookup<'_>],
        tile_reads: Vec<Cmd>,
    ) -> Result<(Vec<Vec<Found>>, Vec<Vec<Option<Vec<u8>>>>), QueryError> {
        let stored: usize = lookups.iter().map(|l| l.entities.len()).sum();
        let mut commands = Vec::with_capacity(stored + tile_reads.len());
        for lookup in lookups {
            let view = lookup.view;
            let fields = self.fields_of(view);
            for entity in &lookup.entities {
                let mut command = redis::cmd("HMGET");
                command.arg(view.redis_key(entity)?).arg(&fields.time);
                for &feature in &lookup.features {
                    command.arg(fields.features.get(feature).map_or(&[][..], Vec::as_slice));
                }
                commands.push(command);
            }
        }
        commands.extend(tile_reads);
        let mut rows = self.query(commands).await?;
        let tiles = rows.split_off(stored.min(rows.len()));
        let mut rows = rows.into_iter();
        let found = lookups
            .iter()
            .map(|lookup| {
                rows.by_ref()
                    .take(lookup.entities.len())
                    .map(|row| {
                        let mut values = row.into_iter();
                        let event_time_ms = values
                            .next()
                            .flatten()
                            .and_then(|raw| lookup.view.event_time(&raw));
                        let mut values: Vec<Option<Vec<u8>>> = values.collect();
                        values.resize(lookup.features.len(), None);
                        Found::read(event_time_ms, values)
                    })
                    .collect()
            })
            .collect();
        Ok((found, tiles))
    }

    /// The features of each entity (`join key → value`), all or those named, as `get` and
    /// `/v1/features` print them: `{"entity", "found", "event_time_ms", "features"}`.
    pub async fn get(
        &self,
        view_name: &str,
        entities: &[HashMap<String, String>],
        wanted: Option<&[String]>,
    ) -> Result<Vec<Value>, QueryError> {
        let view = self.view(view_name)?;
        let features: Vec<usize> = match wanted {
            None => (0..view.features.len()).collect(),
            Some(names) => names
                .iter()
                .map(|name| view.feature_index(name))
                .collect::<Result<_, _>>()?,
        };
        let keys = entities
            .iter()
            .map(|entity| {
                view.keys
                    .iter()
                    .map(|(k, _)| {
                        entity
                            .get(k)
                            .cloned()
                            .ok_or_else(|| QueryError::MissingKey {
                                view: view_name.to_string(),
                                keys: view.key_names(),
                                missing: k.clone(),
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let lookup = Lookup {
            view,
            features,
            entities: keys,
        };
        let found = self
            .lookup(std::slice::from_ref(&lookup))
            .await?
            .pop()
            .unwrap_or_default();
        Ok(found
            .into_iter()
            .zip(entities)
            .map(|(found, entity)| {
                let mut out = Map::new();
                for (asked, &feature) in lookup.features.iter().enumerate() {
                    let decoded = match found.aggregated(asked) {
                        Some(output) => output_json(output, ValueStyle::Typed),
                        None => found.value(asked, feature).map_or(Value::Null, |raw| {
                            view.decode(feature, raw, ValueStyle::Typed)
                        }),
                    };
                    let name = view.features.get(feature).map_or("", |(f, _)| f.as_str());
                    out.insert(name.to_string(), decoded);
                }
                json!({
                    "entity": entity,
                    "found": found.event_time_ms.is_some(),
                    "event_time_ms": found.event_time_ms,
                    "features": out,
                })
            })
            .collect())
    }
}
