//! An online view as readers see it: its keys, features and types, and how its entities
//! keys and fields are named in Redis, in either layout.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::DataType;
use serde_json::Value;

use super::query_error::QueryError;
use super::values::{decode, ValueStyle};
use crate::redis::tiles::TileLayout;
use crate::redis::{entity_key, feast, LayoutKind, RedisSinkConfig, EVENT_TIME_FIELD};

/// One pipeline's online features as readers see them.
#[derive(Debug, Clone)]
pub struct FeatureView {
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
    /// The pipeline's aggregations, when it has some: their features follow the plain ones
    /// in [`FeatureView::features`] and are computed from tiles at each read.
    pub tiles: Option<Arc<TileLayout>>,
}

impl FeatureView {
    /// The view of pipeline `name` written by the sink `online`; `types` gives each column's
    /// Arrow type (a column not in it reads as a string).
    pub fn new(
        name: &str,
        online: &RedisSinkConfig,
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
            tiles: None,
        }
    }

    /// This view with `tiles`' aggregated features after its plain ones.
    pub fn with_aggregations(mut self, tiles: TileLayout) -> Self {
        self.features.extend(tiles.features());
        self.tiles = Some(Arc::new(tiles));
        self
    }

    /// How many of [`FeatureView::features`] are plain (stored values); the rest are
    /// aggregated.
    pub fn plain_features(&self) -> usize {
        let aggregated = self.tiles.as_ref().map_or(0, |t| t.features().len());
        self.features.len().saturating_sub(aggregated)
    }

    /// The position of feature `name` in [`FeatureView::features`].
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

    /// Feature `feature` (an index into [`FeatureView::features`]) stored as `raw`, as JSON.
    pub fn decode(&self, feature: usize, raw: &[u8], style: ValueStyle) -> Value {
        let data_type = self
            .features
            .get(feature)
            .map_or(&DataType::Utf8, |(_, t)| t);
        decode(self.layout, data_type, raw, style)
    }

    /// The Redis key of an entity whose join key values are given as text, in key order.
    pub(super) fn redis_key(&self, values: &[String]) -> Result<Vec<u8>, QueryError> {
        match self.layout {
            LayoutKind::Native => Ok(entity_key(&self.prefix, &self.name, values).into_bytes()),
            LayoutKind::Feast => {
                let typed: Vec<(&str, &str, &DataType)> = self
                    .keys
                    .iter()
                    .zip(values)
                    .map(|((name, data_type), value)| (name.as_str(), value.as_str(), data_type))
                    .collect();
                feast::key_from_text(&self.project, &typed).map_err(|reason| QueryError::BadKey {
                    view: self.name.clone(),
                    reason,
                })
            }
        }
    }

    /// The hash field holding the event time.
    pub(super) fn time_field(&self) -> Vec<u8> {
        match self.layout {
            LayoutKind::Native => EVENT_TIME_FIELD.as_bytes().to_vec(),
            LayoutKind::Feast => format!("_ts:{}", self.name).into_bytes(),
        }
    }

    pub(super) fn feature_field(&self, feature: usize) -> Vec<u8> {
        let name = self.features.get(feature).map_or("", |(f, _)| f.as_str());
        match self.layout {
            LayoutKind::Native => name.as_bytes().to_vec(),
            LayoutKind::Feast => feast::field_hash(&self.name, name).to_vec(),
        }
    }

    /// Epoch ms of the stored event time field.
    pub(super) fn event_time(&self, raw: &[u8]) -> Option<i64> {
        match self.layout {
            LayoutKind::Native => std::str::from_utf8(raw).ok()?.parse::<i64>().ok(),
            LayoutKind::Feast => feast::decode_timestamp(raw),
        }
    }
}
