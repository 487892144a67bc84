//! Reading online features back: the `get` command, `/v1/features` and Feast's
//! `/get-online-features`. One lookup serves them all: per view, the entities' join key
//! values and the features asked, read with one `HMGET` per entity, every view of a request
//! in one pipelined round trip.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::feast::FeastJson;
use super::read_cache::{CachedRow, ReadCache};
use super::values::ValueStyle;
use super::view::FeatureView;
use crate::redis::{RedisClient, RedisConnection, RedisServiceConfig, RedisSetupError};

/// A query that cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// No online pipeline of that name.
    #[error("no online feature view `{0}`")]
    UnknownView(String),
    /// The entity does not name every join key of the view.
    #[error("view `{view}` is keyed by {keys}; missing `{missing}`")]
    MissingKey {
        /// View.
        view: String,
        /// Its join keys.
        keys: String,
        /// The key not given.
        missing: String,
    },
    /// A join key value that does not fit its type.
    #[error("view `{view}`: {reason}")]
    BadKey {
        /// View.
        view: String,
        /// Why.
        reason: String,
    },
    /// A feature that the view does not have.
    #[error("view `{view}` has no feature `{feature}`")]
    UnknownFeature {
        /// View.
        view: String,
        /// Feature asked for.
        feature: String,
    },
    /// The Redis client could not be set up.
    #[error(transparent)]
    Setup(#[from] RedisSetupError),
    /// Redis failed.
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl QueryError {
    /// Whether the caller asked for something wrong (HTTP 4xx) rather than Redis failing.
    pub fn is_client_error(&self) -> bool {
        !matches!(self, QueryError::Redis(_) | QueryError::Setup(_))
    }
}

/// One view's part of a read: the features asked and the entities to look up.
#[derive(Debug, Clone)]
pub struct Lookup<'a> {
    /// The view.
    pub view: &'a FeatureView,
    /// Indices into the view's features, in the order the answer gives them.
    pub features: Vec<usize>,
    /// Per entity, its join key values as text, in the view's key order.
    pub entities: Vec<Vec<String>>,
}

/// What Redis holds for one entity of a [`Lookup`].
#[derive(Debug, Clone)]
pub struct Found {
    /// Event time of the stored values (epoch ms); `None` when Redis holds nothing for the
    /// entity in this view (never written, or expired).
    pub event_time_ms: Option<i64>,
    /// The stored values.
    values: FoundValues,
}

/// Where a [`Found`]'s values are.
#[derive(Debug, Clone)]
enum FoundValues {
    /// Per feature asked, the stored bytes; `None` for a field not there (a null feature).
    Asked(Vec<Option<Vec<u8>>>),
    /// The entity's cached row: every feature of the view.
    Cached(Arc<CachedRow>),
}

impl Found {
    /// What Redis replied: `values` per feature asked, in the lookup's order.
    pub fn read(event_time_ms: Option<i64>, values: Vec<Option<Vec<u8>>>) -> Self {
        Self {
            event_time_ms,
            values: FoundValues::Asked(values),
        }
    }

    /// What the cache holds for the entity.
    pub fn cached(row: Arc<CachedRow>) -> Self {
        Self {
            event_time_ms: row.event_time_ms,
            values: FoundValues::Cached(row),
        }
    }

    /// The stored bytes of the `asked`-th feature of the lookup, feature `feature` of the
    /// view; `None` for a field not there (a null feature).
    pub fn value(&self, asked: usize, feature: usize) -> Option<&[u8]> {
        match &self.values {
            FoundValues::Asked(values) => values.get(asked)?.as_deref(),
            FoundValues::Cached(row) => row.value(feature),
        }
    }

    /// The entity's row in Feast's JSON, when it came from the cache (`view` is the
    /// lookup's): written once per row, copied by every answer after.
    pub fn feast_json(&self, view: &FeatureView) -> Option<&FeastJson> {
        match &self.values {
            FoundValues::Asked(_) => None,
            FoundValues::Cached(row) => Some(row.feast_json(view)),
        }
    }
}

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

/// A view's hash fields.
#[derive(Clone)]
pub(super) struct ViewFields {
    /// The view's number among the reader's (its rows' key in the cache).
    pub(super) id: u32,
    /// The event time's.
    pub(super) time: Vec<u8>,
    /// Each feature's, by index into [`FeatureView::features`].
    pub(super) features: Vec<Vec<u8>>,
}

impl ViewFields {
    fn of(view: &FeatureView, id: u32) -> Self {
        Self {
            id,
            time: view.time_field(),
            features: (0..view.features.len())
                .map(|f| view.feature_field(f))
                .collect(),
        }
    }
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

    pub(super) async fn connection(&self) -> Result<RedisConnection, QueryError> {
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
    pub(super) async fn forget_broken(&self, e: &redis::RedisError) {
        if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
            *self.connection.lock().await = None;
        }
    }

    /// Reads every lookup's entities in one round trip; the answer has one [`Found`] per
    /// entity, per lookup, in order.
    pub async fn lookup(&self, lookups: &[Lookup<'_>]) -> Result<Vec<Vec<Found>>, QueryError> {
        if let Some(cache) = &self.cache {
            return cache.lookup(self, lookups).await;
        }
        let mut commands = Vec::with_capacity(lookups.iter().map(|l| l.entities.len()).sum());
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
        let mut connection = self.connection().await?;
        let rows: Vec<Vec<Option<Vec<u8>>>> = match connection.query_all(commands).await {
            Ok(rows) => rows,
            Err(e) => {
                self.forget_broken(&e).await;
                return Err(e.into());
            }
        };
        let mut rows = rows.into_iter();
        Ok(lookups
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
            .collect())
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
                    let decoded = found.value(asked, feature).map_or(Value::Null, |raw| {
                        view.decode(feature, raw, ValueStyle::Typed)
                    });
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
