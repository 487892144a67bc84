//! Reading online features back: the `get` command and the HTTP `/v1/features` API.

use std::collections::HashMap;

use arrow::datatypes::DataType;
use base64::Engine;
use serde_json::{json, Map, Value};

use super::feast;
use super::layout::{entity_key, EVENT_TIME_FIELD};
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
        }
    }
}

/// Reads feature values of online pipelines in the native layout, typed as JSON.
pub struct OnlineReader {
    connection: RedisConnection,
    views: HashMap<String, OnlineView>,
}

impl OnlineReader {
    /// Connects to Redis; answers for the `views` given.
    pub async fn connect(
        service: &RedisServiceConfig,
        views: impl IntoIterator<Item = OnlineView>,
    ) -> Result<Self, QueryError> {
        let client = RedisClient::open(service)?;
        let connection = client.connect().await?;
        let views = views
            .into_iter()
            .map(|view| (view.name.clone(), view))
            .collect();
        Ok(Self { connection, views })
    }

    /// The features of each entity (`join key → value`), all or those named.
    pub async fn get(
        &self,
        view_name: &str,
        entities: &[HashMap<String, String>],
        wanted: Option<&[String]>,
    ) -> Result<Vec<Value>, QueryError> {
        let view = self
            .views
            .get(view_name)
            .ok_or_else(|| QueryError::UnknownView(view_name.to_string()))?;
        let features: Vec<&(String, DataType)> = match wanted {
            None => view.features.iter().collect(),
            Some(names) => names
                .iter()
                .map(|name| {
                    view.features
                        .iter()
                        .find(|(f, _)| f == name)
                        .ok_or_else(|| QueryError::UnknownFeature {
                            view: view_name.to_string(),
                            feature: name.clone(),
                        })
                })
                .collect::<Result<_, _>>()?,
        };
        let mut commands = Vec::with_capacity(entities.len());
        for entity in entities {
            let values = view
                .keys
                .iter()
                .map(|(k, t)| {
                    entity
                        .get(k)
                        .map(|v| (k.clone(), v.clone(), t.clone()))
                        .ok_or_else(|| QueryError::MissingKey {
                            view: view_name.to_string(),
                            keys: view
                                .keys
                                .iter()
                                .map(|(k, _)| k.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            missing: k.clone(),
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut command = redis::cmd("HMGET");
            match view.layout {
                LayoutKind::Native => {
                    let texts: Vec<String> = values.iter().map(|(_, v, _)| v.clone()).collect();
                    command
                        .arg(entity_key(&view.prefix, view_name, &texts))
                        .arg(EVENT_TIME_FIELD);
                    for (name, _) in &features {
                        command.arg(name);
                    }
                }
                LayoutKind::Feast => {
                    let key = feast::key_from_text(&view.project, &values).map_err(|reason| {
                        QueryError::BadKey {
                            view: view_name.to_string(),
                            reason,
                        }
                    })?;
                    command.arg(key).arg(format!("_ts:{view_name}"));
                    for (name, _) in &features {
                        command.arg(feast::field_hash(view_name, name).as_slice());
                    }
                }
            }
            commands.push(command);
        }
        let mut connection = self.connection.clone();
        let rows: Vec<Vec<Option<Vec<u8>>>> = connection.query_all(commands).await?;
        Ok(rows
            .into_iter()
            .zip(entities)
            .map(|(row, entity)| {
                let mut values = row.into_iter();
                let event_time = values.next().flatten().and_then(|v| match view.layout {
                    LayoutKind::Native => String::from_utf8(v).ok()?.parse::<i64>().ok(),
                    LayoutKind::Feast => feast::decode_timestamp(&v),
                });
                let mut out = Map::new();
                for ((name, data_type), value) in features.iter().zip(values) {
                    let decoded = value.map_or(Value::Null, |v| match view.layout {
                        LayoutKind::Native => typed(data_type, v),
                        LayoutKind::Feast => feast::decode_value(&v),
                    });
                    out.insert(name.clone(), decoded);
                }
                json!({
                    "entity": entity,
                    "found": event_time.is_some(),
                    "event_time_ms": event_time,
                    "features": out,
                })
            })
            .collect())
    }
}

/// Native-layout text back to a JSON value of the feature's type.
fn typed(data_type: &DataType, raw: Vec<u8>) -> Value {
    if matches!(
        data_type,
        DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_)
    ) {
        return Value::String(base64::engine::general_purpose::STANDARD.encode(raw));
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let number = |parsed: Option<Value>| parsed.unwrap_or_else(|| Value::String(text.clone()));
    match data_type {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            number(text.parse::<i64>().ok().map(Value::from))
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            number(text.parse::<u64>().ok().map(Value::from))
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => number(
            text.parse::<f64>()
                .ok()
                .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number)),
        ),
        DataType::Boolean => number(text.parse::<bool>().ok().map(Value::Bool)),
        _ => Value::String(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_values_become_typed_json() {
        assert_eq!(typed(&DataType::Int64, b"42".to_vec()), json!(42));
        assert_eq!(typed(&DataType::Float32, b"0.5".to_vec()), json!(0.5));
        assert_eq!(typed(&DataType::Boolean, b"true".to_vec()), json!(true));
        assert_eq!(typed(&DataType::Utf8, b"x".to_vec()), json!("x"));
        assert_eq!(typed(&DataType::Binary, vec![1, 2]), json!("AQI="));
    }
}
