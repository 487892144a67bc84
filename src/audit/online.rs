//! The online side of an audit: the entities the online store holds for a view (a `SCAN`
//! of its key space) and their rows, read through the same [`FeatureReader`] that serves
//! them, many entities per pipelined round trip.

use futures::StreamExt;
use serde_json::Value;

use super::classify::{EntityKey, OnlineRow};
use super::sample::{Offered, Sampler};
use super::AuditError;
use crate::record::entity_hash;
use crate::redis::feast::decode_entity_key;
use crate::redis::{LayoutKind, RedisClient, RedisServiceConfig};
use crate::serving::{FeatureReader, FeatureView, Found, Lookup, ValueStyle};

/// Entities per pipelined round trip.
const ENTITIES_PER_READ: usize = 1_000;
/// Round trips in flight at once.
const READS_AT_ONCE: usize = 4;
/// Keys a `SCAN` step asks for.
const SCAN_COUNT: usize = 2_000;

/// Reads the online rows of `entities` (`None` where the store holds nothing): the stored
/// (plain) features only; aggregated ones are compared apart (`aggregated.rs`), and asking
/// them here would read and merge every entity's tiles for nothing.
pub async fn read_rows(
    reader: &FeatureReader,
    view: &FeatureView,
    entities: &[EntityKey],
) -> Result<Vec<Option<OnlineRow>>, AuditError> {
    let features: Vec<usize> = (0..view.plain_features()).collect();
    let reads: Vec<_> = entities
        .chunks(ENTITIES_PER_READ)
        .map(|chunk| read_chunk(reader, view, chunk.to_vec(), features.clone()))
        .collect();
    let mut rows = Vec::with_capacity(entities.len());
    let mut chunks = futures::stream::iter(reads).buffered(READS_AT_ONCE);
    while let Some(found) = chunks.next().await {
        for found in found? {
            rows.push(found.event_time_ms.map(|event_time_ms| {
                OnlineRow {
                    event_time_ms,
                    values: features
                        .iter()
                        .map(|&feature| {
                            found.value(feature, feature).map_or(Value::Null, |raw| {
                                view.decode(feature, raw, ValueStyle::Feast)
                            })
                        })
                        .collect(),
                }
            }));
        }
    }
    Ok(rows)
}

async fn read_chunk(
    reader: &FeatureReader,
    view: &FeatureView,
    entities: Vec<EntityKey>,
    features: Vec<usize>,
) -> Result<Vec<Found>, AuditError> {
    let lookup = Lookup {
        view,
        features,
        entities,
    };
    let found = reader.lookup(std::slice::from_ref(&lookup)).await?;
    Ok(found.into_iter().next().unwrap_or_default())
}

/// Offers every entity whose key the online store holds for `view` to `sampler`; returns
/// the keys scanned, or `None` on a Redis Cluster (its key space is not scanned: entities
/// only online are then not found).
pub async fn scan_entities(
    service: &RedisServiceConfig,
    view: &FeatureView,
    sampler: &mut Sampler,
    mut on_evicted: impl FnMut(EntityKey),
    found: &mut Vec<EntityKey>,
) -> Result<Option<u64>, AuditError> {
    let client = RedisClient::open(service)?;
    if client.is_cluster() {
        return Ok(None);
    }
    let mut connection = client.connect().await?;
    let pattern = match view.layout {
        LayoutKind::Native => format!(
            "{}*",
            glob_escape(&format!("{}:{}:", view.prefix, view.name))
        ),
        LayoutKind::Feast => format!("*{}", glob_escape(&view.project)),
    };
    let mut cursor = "0".to_string();
    let mut scanned = 0u64;
    loop {
        let mut command = redis::cmd("SCAN");
        command
            .arg(&cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let replies: Vec<(String, Vec<Vec<u8>>)> = connection.query_all(vec![command]).await?;
        let Some((next, keys)) = replies.into_iter().next() else {
            break;
        };
        for raw in keys {
            scanned += 1;
            let Some(key) = entity_of(view, &raw) else {
                continue;
            };
            match sampler.offer(&key, entity_hash(&key)) {
                Offered::Refused => {}
                Offered::Kept => found.push(key),
                Offered::KeptEvicting(evicted) => {
                    on_evicted(evicted);
                    found.push(key);
                }
            }
        }
        if next == "0" {
            break;
        }
        cursor = next;
    }
    Ok(Some(scanned))
}

/// The entity a Redis key of `view` names (join key values in the view's key order).
fn entity_of(view: &FeatureView, raw: &[u8]) -> Option<EntityKey> {
    match view.layout {
        LayoutKind::Native => {
            let text = std::str::from_utf8(raw).ok()?;
            let rest = text.strip_prefix(&format!("{}:{}:", view.prefix, view.name))?;
            let values: EntityKey = rest
                .splitn(view.keys.len(), ':')
                .map(str::to_string)
                .collect();
            (values.len() == view.keys.len()).then_some(values)
        }
        LayoutKind::Feast => {
            let pairs = decode_entity_key(raw, &view.project)?;
            if pairs.len() != view.keys.len() {
                return None;
            }
            view.keys
                .iter()
                .map(|(name, _)| {
                    pairs
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, value)| value.clone())
                })
                .collect()
        }
    }
}

/// `text` matched literally by a `SCAN MATCH` pattern.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_patterns_match_names_literally() {
        assert_eq!(glob_escape("fc:a*b"), "fc:a\\*b");
        assert_eq!(glob_escape("x[1]?"), "x\\[1\\]\\?");
    }
}
