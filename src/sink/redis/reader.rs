//! Reading online features back: the `get` command, `/v1/features` and Feast's
//! `/get-online-features`. One lookup serves them all: per view, the entities' join key
//! values and the features asked, read with one `HMGET` per entity, every view of a request
//! in one pipelined round trip.

use std::collections::HashMap;
use std::time::Duration;

use arrow::datatypes::DataType;
use serde_json::{json, Map, Value};

use super::feast;
use super::layout::{entity_key, EVENT_TIME_FIELD};
use super::values::{decode, ValueStyle};
use super::{LayoutKind, RedisClient, RedisConnection, RedisServiceConfig};

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
    Setup(#[from] super::RedisSetupError),
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

/// One pipeline's online features as readers see them.
#[derive(Debug, Clone)]
pub struct OnlineView {
    /// The view's name (the pipeline's).
    pub name: String,
    /// Key prefix of the native layout.
    pub prefix: String,
    /// Join keys with their Arrow types, in key order.
    pub keys: Vec<(String, DataType)>,
    /// Features with their Arrow types.
    pub features: Vec<(String, DataType)>,
    /// How the values are laid out in Redis.
    pub layout: LayoutKind,
    /// Feast project of the Feast layout.
    pub project: String,
    /// The sink's `online.ttl`: values whose event time is older are past their max age (a
    /// hash whose expiry was refreshed by a late event can hold such values).
    pub ttl: Option<Duration>,
}

impl OnlineView {
    /// The view of pipeline `name` written by the sink `online`; `types` gives each column's
    /// Arrow type (a column not in it reads as a string).
    pub fn new(
        name: &str,
        online: &super::OnlineSinkConfig,
        keys: &[String],
        features: &[String],
        types: &[(String, DataType)],
    ) -> Self {
        let typed = |names: &[String]| -> Vec<(String, DataType)> {
            names
                .iter()
                .map(|f| {
                    let data_type = types
                        .iter()
                        .find(|(name, _)| name == f)
                        .map_or(DataType::Utf8, |(_, t)| t.clone());
                    (f.clone(), data_type)
                })
                .collect()
        };
        Self {
            name: name.to_string(),
            prefix: online.key_prefix.clone(),
            keys: typed(keys),
            features: typed(features),
            layout: online.layout,
            project: online
                .feast_project
                .clone()
                .unwrap_or_else(|| name.to_string()),
            ttl: online.ttl,
        }
    }

    /// The position of feature `name` in [`OnlineView::features`].
    pub fn feature_index(&self, name: &str) -> Result<usize, QueryError> {
        self.features
            .iter()
            .position(|(f, _)| f == name)
            .ok_or_else(|| QueryError::UnknownFeature {
                view: self.name.clone(),
                feature: name.to_string(),
            })
    }

    /// The view's join keys, comma-separated, for messages.
    pub fn key_names(&self) -> String {
        let names: Vec<&str> = self.keys.iter().map(|(k, _)| k.as_str()).collect();
        names.join(", ")
    }

    /// Feature `feature` (an index into [`OnlineView::features`]) stored as `raw`, as JSON.
    pub fn decode(&self, feature: usize, raw: &[u8], style: ValueStyle) -> Value {
        let data_type = self
            .features
            .get(feature)
            .map_or(&DataType::Utf8, |(_, t)| t);
        decode(self.layout, data_type, raw, style)
    }

    /// The Redis key of an entity whose join key values are given as text, in key order.
    fn redis_key(&self, values: &[String]) -> Result<Vec<u8>, QueryError> {
        match self.layout {
            LayoutKind::Native => Ok(entity_key(&self.prefix, &self.name, values).into_bytes()),
            LayoutKind::Feast => {
                let typed: Vec<(String, String, DataType)> = self
                    .keys
                    .iter()
                    .zip(values)
                    .map(|((name, data_type), value)| {
                        (name.clone(), value.clone(), data_type.clone())
                    })
                    .collect();
                feast::key_from_text(&self.project, &typed).map_err(|reason| QueryError::BadKey {
                    view: self.name.clone(),
                    reason,
                })
            }
        }
    }

    /// The hash field holding the event time.
    fn time_field(&self) -> Vec<u8> {
        match self.layout {
            LayoutKind::Native => EVENT_TIME_FIELD.as_bytes().to_vec(),
            LayoutKind::Feast => format!("_ts:{}", self.name).into_bytes(),
        }
    }

    fn feature_field(&self, feature: usize) -> Vec<u8> {
        let name = self.features.get(feature).map_or("", |(f, _)| f.as_str());
        match self.layout {
            LayoutKind::Native => name.as_bytes().to_vec(),
            LayoutKind::Feast => feast::field_hash(&self.name, name).to_vec(),
        }
    }

    /// Epoch ms of the stored event time field.
    fn event_time(&self, raw: &[u8]) -> Option<i64> {
        match self.layout {
            LayoutKind::Native => std::str::from_utf8(raw).ok()?.parse::<i64>().ok(),
            LayoutKind::Feast => feast::decode_timestamp(raw),
        }
    }
}

/// One view's part of a read: the features asked and the entities to look up.
#[derive(Debug, Clone)]
pub struct Lookup<'a> {
    /// The view.
    pub view: &'a OnlineView,
    /// Indices into the view's features, in the order the answer gives them.
    pub features: Vec<usize>,
    /// Per entity, its join key values as text, in the view's key order.
    pub entities: Vec<Vec<String>>,
}

/// What Redis holds for one entity of a [`Lookup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Event time of the stored values (epoch ms); `None` when Redis holds nothing for the
    /// entity in this view (never written, or expired).
    pub event_time_ms: Option<i64>,
    /// Per feature asked, the stored bytes; `None` for a field not there (a null feature).
    pub values: Vec<Option<Vec<u8>>>,
}

/// Reads feature values of online pipelines, in either layout.
pub struct OnlineReader {
    client: RedisClient,
    /// The connection every read shares; dropped when it fails, so that the next read
    /// connects again (Redis restarted, or was down when the reader was made).
    connection: tokio::sync::Mutex<Option<RedisConnection>>,
    views: HashMap<String, OnlineView>,
    /// Per view, its hash fields: worked out once (a Feast field name is a hash).
    fields: HashMap<String, ViewFields>,
}

/// A view's hash fields.
struct ViewFields {
    /// The event time's.
    time: Vec<u8>,
    /// Each feature's, by index into [`OnlineView::features`].
    features: Vec<Vec<u8>>,
}

impl ViewFields {
    fn of(view: &OnlineView) -> Self {
        Self {
            time: view.time_field(),
            features: (0..view.features.len())
                .map(|f| view.feature_field(f))
                .collect(),
        }
    }
}

impl OnlineReader {
    /// A reader for the `views` given that connects on its first read.
    pub fn new(
        service: &RedisServiceConfig,
        views: impl IntoIterator<Item = OnlineView>,
    ) -> Result<Self, QueryError> {
        let client = RedisClient::open(service)?;
        let views: HashMap<String, OnlineView> = views
            .into_iter()
            .map(|view| (view.name.clone(), view))
            .collect();
        let fields = views
            .iter()
            .map(|(name, view)| (name.clone(), ViewFields::of(view)))
            .collect();
        Ok(Self {
            client,
            connection: tokio::sync::Mutex::new(None),
            views,
            fields,
        })
    }

    /// Like [`OnlineReader::new`], connected now (so that a wrong URL or password shows
    /// at once).
    pub async fn connect(
        service: &RedisServiceConfig,
        views: impl IntoIterator<Item = OnlineView>,
    ) -> Result<Self, QueryError> {
        let reader = Self::new(service, views)?;
        reader.connection().await?;
        Ok(reader)
    }

    async fn connection(&self) -> Result<RedisConnection, QueryError> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let connection = self.client.connect().await?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// The online view `name`.
    pub fn view(&self, name: &str) -> Result<&OnlineView, QueryError> {
        self.views
            .get(name)
            .ok_or_else(|| QueryError::UnknownView(name.to_string()))
    }

    /// Reads every lookup's entities in one round trip; the answer has one [`Found`] per
    /// entity, per lookup, in order.
    pub async fn lookup(&self, lookups: &[Lookup<'_>]) -> Result<Vec<Vec<Found>>, QueryError> {
        let mut commands = Vec::with_capacity(lookups.iter().map(|l| l.entities.len()).sum());
        for lookup in lookups {
            let view = lookup.view;
            // This reader's own views have their fields worked out; another view (a caller's
            // own) gets them now.
            let computed;
            let fields = match self.fields.get(&view.name) {
                Some(fields)
                    if self
                        .views
                        .get(&view.name)
                        .is_some_and(|v| std::ptr::eq(v, view)) =>
                {
                    fields
                }
                _ => {
                    computed = ViewFields::of(view);
                    &computed
                }
            };
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
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    *self.connection.lock().await = None;
                }
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
                        Found {
                            event_time_ms,
                            values,
                        }
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
                for (&feature, value) in lookup.features.iter().zip(found.values) {
                    let decoded = value.map_or(Value::Null, |raw| {
                        view.decode(feature, &raw, ValueStyle::Typed)
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
