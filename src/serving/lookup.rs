//! What a read asks and what it finds: per view the entities and features asked
//! ([`Lookup`]), per entity what Redis or the read cache holds ([`Found`]), and the view's
//! hash fields every read of it names.

use std::sync::Arc;

use super::feast::FeastJson;
use super::read_cache::CachedRow;
use super::view::FeatureView;
use crate::aggregate::Output;

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
    /// Per feature asked, its value when it is an aggregated feature (empty when the lookup
    /// asked none).
    aggregated: Vec<Option<Output>>,
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
            aggregated: Vec::new(),
        }
    }

    /// What the cache holds for the entity.
    pub fn cached(row: Arc<CachedRow>) -> Self {
        Self {
            event_time_ms: row.event_time_ms,
            values: FoundValues::Cached(row),
            aggregated: Vec::new(),
        }
    }

    /// Sets the aggregated features' values, one per feature asked (`None` for plain ones).
    pub fn set_aggregated(&mut self, values: Vec<Option<Output>>) {
        self.aggregated = values;
    }

    /// The value of the `asked`-th feature of the lookup when it is an aggregated one.
    pub fn aggregated(&self, asked: usize) -> Option<&Output> {
        self.aggregated.get(asked)?.as_ref()
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
        if !self.aggregated.is_empty() {
            return None;
        }
        match &self.values {
            FoundValues::Asked(_) => None,
            FoundValues::Cached(row) => Some(row.feast_json(view)),
        }
    }
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
    pub(super) fn of(view: &FeatureView, id: u32) -> Self {
        Self {
            id,
            time: view.time_field(),
            features: (0..view.features.len())
                .map(|f| view.feature_field(f))
                .collect(),
        }
    }
}
