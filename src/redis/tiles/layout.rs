//! Where an entity's tiles live in Redis: one hash per entity, `{prefix}:tiles:{view}:{keys}`
//! in either layout (one key, so one slot of a cluster). Its fields:
//!
//! - `_t`: every aggregation's tiles in one value (fewer, larger fields cost Redis less
//!   memory than a field per hop: 17 fields took 4,736 bytes where one takes about 3,300).
//!   It is a version byte, then one section per aggregation and hop its windows use: a
//!   4-byte id, the length, and that hop's tiles as [`encode_tiles`] writes them. The id is a
//!   hash of everything the section's bytes depend on (`amount:sum(amount_eur):1h`), so a
//!   changed definition starts from empty tiles rather than misreading old ones.
//! - `_p`: per stream, the position of the newest event the tiles hold, one line each
//!   (`{stream} {segment}:{entry}:{index}`), so that a redelivered event is not applied twice.
//! - `_v`: a token unique to every write, which an update checks to be the one it started from.

use arrow::datatypes::DataType;

use crate::aggregate::{
    decode_tiles, duration_name, encode_tiles, longest_reach_ms, Aggregation, AppliedPositions,
    CodecError, Function, Output, Tiles,
};
use crate::source::Offset;

/// Hash field counting an entity's tile updates.
pub const VERSION_FIELD: &str = "_v";
/// Hash field holding the per-stream positions.
pub const POSITIONS_FIELD: &str = "_p";
/// Hash field holding the tiles.
pub const TILES_FIELD: &str = "_t";

/// The version of the `_t` value's layout, its first byte.
const SECTIONS_VERSION: u8 = 1;

/// Stored tiles or positions that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum TileError {
    /// A section of the tiles field.
    #[error("tiles `{section}` of `{key}`: {source}")]
    Tiles {
        /// The hash.
        key: String,
        /// The section (aggregation, function, column, hop).
        section: String,
        /// What is wrong with it.
        #[source]
        source: CodecError,
    },
    /// The tiles field's own framing.
    #[error("field `_t` of `{key}` is cut short or of an unknown version")]
    Sections {
        /// The hash.
        key: String,
    },
    /// The positions field.
    #[error("field `_p` of `{key}` is not a list of stream positions: {line:?}")]
    Positions {
        /// The hash.
        key: String,
        /// The line that does not read.
        line: String,
    },
}

/// The key of the tiles of an entity whose join key values are `key_values`, in key order.
pub fn tiles_key(prefix: &str, view: &str, key_values: &[String]) -> String {
    format!("{prefix}:tiles:{view}:{}", key_values.join(":"))
}

/// One section of the tiles field: which aggregation and hop it holds.
#[derive(Debug, Clone)]
pub struct TileSection {
    /// Index of the aggregation.
    pub aggregation: usize,
    /// The hop of its tiles.
    pub hop_ms: i64,
    /// What its bytes depend on: `{name}:{function}({column}):{hop}`.
    pub name: String,
    /// The hash of `name` that identifies it in the field.
    pub id: u32,
}

/// A pipeline's aggregations as hash fields.
#[derive(Debug, Clone)]
pub struct TileLayout {
    prefix: String,
    view: String,
    aggregations: Vec<Aggregation>,
    sections: Vec<TileSection>,
}

impl TileLayout {
    /// The tiles of pipeline `view`'s `aggregations`, under keys starting with `prefix`.
    pub fn new(prefix: &str, view: &str, aggregations: Vec<Aggregation>) -> Self {
        let mut sections = Vec::new();
        for (index, aggregation) in aggregations.iter().enumerate() {
            let function = match aggregation.spec.function() {
                Function::LastK(_) => "last_k",
                other => other.name(),
            };
            let column = aggregation.column.as_deref().unwrap_or("");
            for &(hop_ms, _) in aggregation.spec.retention_by_hop() {
                let name = format!(
                    "{}:{function}({column}):{}",
                    aggregation.name,
                    duration_name(hop_ms)
                );
                sections.push(TileSection {
                    aggregation: index,
                    hop_ms,
                    id: section_id(&name),
                    name,
                });
            }
        }
        TileLayout {
            prefix: prefix.to_string(),
            view: view.to_string(),
            aggregations,
            sections,
        }
    }

    /// The aggregations, in the pipeline file's order.
    pub fn aggregations(&self) -> &[Aggregation] {
        &self.aggregations
    }

    /// Every section of the tiles field, aggregation by aggregation, each by increasing hop.
    pub fn sections(&self) -> &[TileSection] {
        &self.sections
    }

    /// The hash of an entity's tiles.
    pub fn key(&self, key_values: &[String]) -> String {
        tiles_key(&self.prefix, &self.view, key_values)
    }

    /// What every hash of tiles starts with: the key values follow, joined by `:`.
    pub fn key_start(&self) -> String {
        tiles_key(&self.prefix, &self.view, &[])
    }

    /// How long an entity's tiles stay useful after an update: the longest reach of its
    /// aggregations (window plus hop) plus `future_skew_ms` (events may be stamped that far
    /// ahead).
    pub fn expiry_ms(&self, future_skew_ms: i64) -> i64 {
        longest_reach_ms(&self.aggregations).saturating_add(future_skew_ms)
    }

    /// Every aggregation's tiles from the tiles field of the hash `key` (`None`: not there).
    /// Sections of definitions no longer in the layout are left out.
    pub fn decode(&self, key: &str, value: Option<&[u8]>) -> Result<Vec<Tiles>, TileError> {
        let mut hops = vec![Vec::new(); self.aggregations.len()];
        let cut = || TileError::Sections {
            key: key.to_string(),
        };
        if let Some(mut bytes) = value {
            match take(&mut bytes, 1).ok_or_else(cut)? {
                [SECTIONS_VERSION] => {}
                _ => return Err(cut()),
            }
            while !bytes.is_empty() {
                let id = take(&mut bytes, 4).ok_or_else(cut)?;
                let id = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
                let len = prost::encoding::decode_varint(&mut bytes).map_err(|_| cut())?;
                let len = usize::try_from(len).map_err(|_| cut())?;
                let data = take(&mut bytes, len).ok_or_else(cut)?;
                let Some(section) = self.sections.iter().find(|s| s.id == id) else {
                    continue;
                };
                let function = self.aggregations[section.aggregation].spec.function();
                let tiles = decode_tiles(function, section.hop_ms, data).map_err(|source| {
                    TileError::Tiles {
                        key: key.to_string(),
                        section: section.name.clone(),
                        source,
                    }
                })?;
                hops[section.aggregation].push((section.hop_ms, tiles));
            }
        }
        Ok(hops.into_iter().map(Tiles::from_hops).collect())
    }

    /// The tiles field's value that stores `tiles` (one per aggregation).
    pub fn encode(&self, tiles: &[Tiles]) -> Vec<u8> {
        let empty = Default::default();
        let mut out = vec![SECTIONS_VERSION];
        for section in &self.sections {
            let hop = tiles
                .get(section.aggregation)
                .and_then(|t| t.hops().find(|(hop, _)| *hop == section.hop_ms))
                .map_or(&empty, |(_, tiles)| tiles);
            if hop.is_empty() {
                continue;
            }
            let data = encode_tiles(section.hop_ms, hop);
            out.extend_from_slice(&section.id.to_le_bytes());
            prost::encoding::encode_varint(data.len() as u64, &mut out);
            out.extend_from_slice(&data);
        }
        out
    }

    /// The value of every window of every aggregation at `t` (ms since 1970), aggregation
    /// by aggregation, from an entity's `tiles`.
    pub fn read(&self, tiles: &[Tiles], t: i64) -> Vec<Output> {
        let none = Tiles::default();
        self.aggregations
            .iter()
            .enumerate()
            .flat_map(|(i, aggregation)| {
                let tiles = tiles.get(i).unwrap_or(&none);
                let spec = &aggregation.spec;
                spec.windows().iter().map(move |w| tiles.read(spec, w, t))
            })
            .collect()
    }

    /// Each aggregated feature's name and Arrow type, in the order [`TileLayout::read`]
    /// gives their values.
    pub fn features(&self) -> Vec<(String, DataType)> {
        self.aggregations
            .iter()
            .flat_map(|aggregation| {
                let data_type = aggregation.output_type();
                aggregation
                    .feature_names()
                    .into_iter()
                    .map(move |name| (name, data_type.clone()))
            })
            .collect()
    }
}

/// A section's id: FNV-1a of its name.
fn section_id(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// The first `n` bytes of `bytes`, which then starts after them; `None` when it is shorter.
fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if bytes.len() < n {
        return None;
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Some(head)
}

/// The positions as the `_p` field holds them.
pub fn encode_positions(positions: &AppliedPositions<Offset>) -> Vec<u8> {
    let mut out = String::new();
    for (stream, (segment, entry, index)) in positions.iter() {
        out.push_str(&format!("{stream} {segment}:{entry}:{index}\n"));
    }
    out.into_bytes()
}

/// What [`encode_positions`] wrote, read from the hash `key`.
pub fn decode_positions(key: &str, bytes: &[u8]) -> Result<AppliedPositions<Offset>, TileError> {
    let mut positions = AppliedPositions::default();
    for line in String::from_utf8_lossy(bytes).lines() {
        let bad = || TileError::Positions {
            key: key.to_string(),
            line: line.to_string(),
        };
        let (stream, offset) = line.rsplit_once(' ').ok_or_else(bad)?;
        let mut parts = offset.split(':');
        let (Some(segment), Some(entry), Some(index), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let offset: Offset = (
            segment.parse().map_err(|_| bad())?,
            entry.parse().map_err(|_| bad())?,
            index.parse().map_err(|_| bad())?,
        );
        positions.hold(stream, offset);
    }
    Ok(positions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{AggregationSpec, Datum, Event, Kind, Window};

    const HOUR: i64 = 3_600_000;

    fn aggregation(name: &str, function: Function, column: Option<&str>) -> Aggregation {
        let windows = [HOUR, 24 * HOUR, 30 * 24 * HOUR]
            .iter()
            .map(|&w| Window::new(w).expect("window"))
            .collect();
        Aggregation {
            name: name.into(),
            column: column.map(Into::into),
            kind: Kind::Float,
            spec: AggregationSpec::new(function, true, windows),
        }
    }

    #[test]
    fn sections_name_aggregation_function_column_and_hop() {
        let layout = TileLayout::new(
            "fc",
            "orders",
            vec![
                aggregation("n", Function::Count, None),
                aggregation("items", Function::LastK(3), Some("amount")),
            ],
        );
        let names: Vec<&str> = layout.sections().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "n:count():5m",
                "n:count():1h",
                "n:count():1d",
                "items:last_k(amount):5m",
                "items:last_k(amount):1h",
                "items:last_k(amount):1d"
            ]
        );
        assert_eq!(layout.key(&["u1".into()]), "fc:tiles:orders:u1");
        // 30 days plus its 1-day hop, plus the skew.
        assert_eq!(layout.expiry_ms(1_000), 31 * 24 * HOUR + 1_000);
        let features: Vec<String> = layout.features().into_iter().map(|(n, _)| n).collect();
        assert_eq!(features[..3], ["n_1h", "n_1d", "n_30d"]);
    }

    #[test]
    fn tiles_and_positions_read_back_as_written() {
        let layout = TileLayout::new(
            "fc",
            "orders",
            vec![
                aggregation("n", Function::Count, None),
                aggregation("total", Function::Sum, Some("amount")),
            ],
        );
        let specs: Vec<_> = layout
            .aggregations()
            .iter()
            .map(|a| a.spec.clone())
            .collect();
        let mut tiles = vec![Tiles::default(); 2];
        let mut positions: AppliedPositions<Offset> = AppliedPositions::default();
        let now = 1_700_000_000_000;
        let messages: Vec<Vec<Event>> = (0..50)
            .map(|i| {
                let event = Event {
                    event_time: now - i * 600_000,
                    publish_time: now,
                    value: Some(Datum::Float(i as f64 / 4.0)),
                    tie_break: 0,
                };
                vec![event; 2]
            })
            .collect();
        positions.apply_new(
            &specs,
            &mut tiles,
            messages.iter().enumerate().map(|(i, m)| {
                (
                    "persistent://t/n/a-partition-0",
                    (3, i as u64, -1),
                    m.as_slice(),
                )
            }),
        );
        let stored = layout.encode(&tiles);
        let read = layout.decode("k", Some(&stored)).expect("reads back");
        assert_eq!(read, tiles);
        assert_eq!(
            layout.read(&read, now)[..2],
            [Output::Int(7), Output::Int(50)]
        );
        let back = decode_positions("k", &encode_positions(&positions)).expect("positions");
        assert_eq!(back, positions);
        assert_eq!(
            back.get("persistent://t/n/a-partition-0"),
            Some(&(3, 49, -1))
        );
        assert!(decode_positions("k", b"stream 1:2\n").is_err());
        let cut = &stored[..stored.len() - 1];
        assert!(layout.decode("k", Some(cut)).is_err());
        assert_eq!(
            layout.decode("k", None).expect("empty"),
            vec![Tiles::default(); 2]
        );
        // A section of a definition that changed is left out, the others read.
        let renamed = TileLayout::new(
            "fc",
            "orders",
            vec![
                aggregation("n", Function::Count, None),
                aggregation("total", Function::Sum, Some("price")),
            ],
        );
        let read = renamed.decode("k", Some(&stored)).expect("reads");
        assert_eq!(read[0], tiles[0]);
        assert!(read[1].is_empty());
    }
}
