//! Redis layouts: how an entity's newest row becomes a key and hash fields.
//!
//! `native`: key `{prefix}:{pipeline}:{key1}[:{key2}…]`, one field per feature and
//! `_ts` = event time in epoch milliseconds; values are text (integers and floats in their
//! shortest round-trip decimal form, booleans `true`/`false`, strings as written, bytes raw,
//! timestamps RFC 3339). `feast`: Feast's own bytes (see [`super::feast`]). In both, a null
//! feature removes its field.

use std::fmt::Write as _;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::entity_write::{EntityWrite, EntityWrites};
use super::feast::FeastLayout;
use super::newest::{column, newest_per_entity};
use super::ties::{RowTies, TIE_FIELD};
use crate::record::{KeyText, RowLayout};

/// Hash field of the native layout holding the event time (epoch milliseconds).
pub const EVENT_TIME_FIELD: &str = "_ts";

/// How the stored event time is encoded, for the latest-wins comparison in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeEncoding {
    /// Decimal epoch milliseconds.
    Millis,
    /// A serialized `google.protobuf.Timestamp`.
    ProtoTimestamp,
}

impl TimeEncoding {
    /// The name the Lua script knows it by.
    pub fn script_name(self) -> &'static str {
        match self {
            TimeEncoding::Millis => "ms",
            TimeEncoding::ProtoTimestamp => "pbts",
        }
    }
}

/// A layout chosen per pipeline (`online.layout`).
#[derive(Debug, Clone)]
pub enum Layout {
    /// Human-readable.
    Native(NativeLayout),
    /// Byte-compatible with Feast's Redis online store.
    Feast(FeastLayout),
}

impl Layout {
    /// The hash field holding the event time.
    pub fn time_field(&self) -> Vec<u8> {
        match self {
            Layout::Native(_) => EVENT_TIME_FIELD.as_bytes().to_vec(),
            Layout::Feast(feast) => feast.time_field(),
        }
    }

    /// The hash field holding the tie value (`_tie`, `_tie:<view>` in Feast's layout, where
    /// Feast's reader ignores it), written only when a geo-replicated namespace breaks ties.
    pub fn tie_field(&self) -> Vec<u8> {
        match self {
            Layout::Native(_) => TIE_FIELD.as_bytes().to_vec(),
            Layout::Feast(feast) => feast.tie_field(),
        }
    }

    /// How that field is encoded.
    pub fn time_encoding(&self) -> TimeEncoding {
        match self {
            Layout::Native(_) => TimeEncoding::Millis,
            Layout::Feast(_) => TimeEncoding::ProtoTimestamp,
        }
    }

    /// Hands `out` one write per entity: the row with the greatest event time; on a tie the
    /// row with the greater tie value when `ties` are given, else the later row.
    pub fn write_entities(
        &self,
        rows: &RecordBatch,
        ties: Option<&RowTies<'_>>,
        out: &mut dyn EntityWrites,
    ) -> Result<(), ArrowError> {
        match self {
            Layout::Native(native) => native.write_entities(rows, ties, out),
            Layout::Feast(feast) => feast.write_entities(rows, ties, out),
        }
    }

    /// The same writes as owned values.
    pub fn entity_writes(
        &self,
        rows: &RecordBatch,
        ties: Option<&RowTies<'_>>,
    ) -> Result<Vec<EntityWrite>, ArrowError> {
        let mut writes = Vec::new();
        self.write_entities(rows, ties, &mut writes)?;
        Ok(writes)
    }
}

/// Builds Redis writes in the native layout.
#[derive(Debug, Clone)]
pub struct NativeLayout {
    prefix: String,
    view: String,
    layout: RowLayout,
}

/// `{prefix}:{view}:{k1}:{k2}` for entity key values.
pub fn entity_key(prefix: &str, view: &str, key_values: &[String]) -> String {
    format!("{prefix}:{view}:{}", key_values.join(":"))
}

impl NativeLayout {
    /// Keys `{prefix}:{view}:…` for rows shaped by `layout`.
    pub fn new(prefix: &str, view: &str, layout: RowLayout) -> Self {
        Self {
            prefix: prefix.to_string(),
            view: view.to_string(),
            layout,
        }
    }

    fn write_entities(
        &self,
        rows: &RecordBatch,
        ties: Option<&RowTies<'_>>,
        out: &mut dyn EntityWrites,
    ) -> Result<(), ArrowError> {
        let options = FormatOptions::default().with_null("");
        let keys = KeyText::new(
            self.layout
                .keys
                .iter()
                .map(|k| column(rows, k))
                .collect::<Result<Vec<_>, _>>()?,
        )?;
        // Text is formatted into these two buffers and copied from there: no allocation per
        // row or value beyond the entity key itself.
        let mut text = String::new();
        let mut format_error = None;
        let newest = newest_per_entity(rows, &self.layout, ties, |row| {
            if keys.has_null(row) {
                return None;
            }
            text.clear();
            text.push_str(&self.prefix);
            text.push(':');
            text.push_str(&self.view);
            text.push(':');
            if let Err(e) = keys.append(row, ":", &mut text) {
                format_error.get_or_insert(e);
            }
            Some(text.as_bytes().to_vec())
        })?;
        if let Some(e) = format_error {
            return Err(e);
        }
        let features = self
            .layout
            .features
            .iter()
            .map(|name| Ok((name.as_bytes(), column(rows, name)?)))
            .collect::<Result<Vec<_>, ArrowError>>()?;
        let formatters = features
            .iter()
            .map(|(_, c)| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        let mut time_text = String::new();
        for (key, event_time_ms, row) in newest {
            let sets = features.iter().filter(|(_, c)| !c.is_null(row)).count();
            time_text.clear();
            let _ = write!(time_text, "{event_time_ms}");
            let tie = ties.map(|t| t.row(row));
            out.entity(&key, event_time_ms, time_text.as_bytes(), tie, sets);
            for ((field, column), formatter) in features.iter().zip(&formatters) {
                if column.is_null(row) {
                    continue;
                }
                match column.data_type() {
                    DataType::Binary => out.set(field, column.as_binary::<i32>().value(row)),
                    DataType::LargeBinary => out.set(field, column.as_binary::<i64>().value(row)),
                    DataType::FixedSizeBinary(_) => {
                        out.set(field, column.as_fixed_size_binary().value(row));
                    }
                    DataType::Utf8 => {
                        out.set(field, column.as_string::<i32>().value(row).as_bytes())
                    }
                    _ => {
                        text.clear();
                        formatter.value(row).write(&mut text)?;
                        out.set(field, text.as_bytes());
                    }
                }
            }
            for (field, column) in &features {
                if column.is_null(row) {
                    out.delete(field);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray};

    use super::*;

    #[test]
    fn newest_row_per_entity_with_readable_values() {
        let rows = RecordBatch::try_from_iter(vec![
            (
                "user_id",
                Arc::new(StringArray::from(vec!["a", "b", "a", "a"])) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(Int64Array::from(vec![10, 5, 30, 20])) as ArrayRef,
            ),
            (
                "ctr",
                Arc::new(Float64Array::from(vec![
                    Some(0.1),
                    Some(0.2),
                    None,
                    Some(0.4),
                ])) as ArrayRef,
            ),
            (
                "vip",
                Arc::new(BooleanArray::from(vec![true, false, true, false])) as ArrayRef,
            ),
        ])
        .unwrap();
        let layout = Layout::Native(NativeLayout::new(
            "fc",
            "users",
            RowLayout {
                keys: vec!["user_id".into()],
                event_time: "ts".into(),
                features: vec!["ctr".into(), "vip".into()],
            },
        ));
        let writes = layout.entity_writes(&rows, None).unwrap();
        assert_eq!(
            writes,
            vec![
                EntityWrite {
                    key: b"fc:users:a".to_vec(),
                    event_time_ms: 30,
                    time_value: b"30".to_vec(),
                    tie: None,
                    set: vec![(b"vip".to_vec(), b"true".to_vec())],
                    delete: vec![b"ctr".to_vec()],
                },
                EntityWrite {
                    key: b"fc:users:b".to_vec(),
                    event_time_ms: 5,
                    time_value: b"5".to_vec(),
                    tie: None,
                    set: vec![
                        (b"ctr".to_vec(), b"0.2".to_vec()),
                        (b"vip".to_vec(), b"false".to_vec())
                    ],
                    delete: vec![],
                },
            ]
        );
    }

    #[test]
    fn within_a_batch_equal_event_times_go_to_the_greater_tie_value() {
        use crate::record::RowBatch;
        use crate::source::MessagePosition;

        let rows = RecordBatch::try_from_iter(vec![
            (
                "user_id",
                Arc::new(StringArray::from(vec!["a", "a", "b", "b"])) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(Int64Array::from(vec![10, 10, 10, 10])) as ArrayRef,
            ),
            (
                "n",
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])) as ArrayRef,
            ),
        ])
        .unwrap();
        let at = |topic: &str| MessagePosition {
            topic: topic.into(),
            offset: (1, 1, -1),
            entry_size: None,
            origin: None,
        };
        // `a`: the greater tie value first; `b`: last.
        let batch = RowBatch {
            rows: rows.clone(),
            positions: vec![at("west/t"), at("east/t"), at("east/t"), at("west/t")],
            row_positions: vec![0, 1, 2, 3],
            publish_times_ms: vec![7, 7, 7, 7],
        };
        let layout = Layout::Native(NativeLayout::new(
            "fc",
            "users",
            RowLayout {
                keys: vec!["user_id".into()],
                event_time: "ts".into(),
                features: vec!["n".into()],
            },
        ));
        let values = |writes: Vec<EntityWrite>| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
            writes
                .into_iter()
                .map(|w| (w.set[0].1.clone(), w.tie))
                .collect()
        };
        let ties = RowTies::of(&batch);
        let tie = |cluster: &str| Some(format!("00000000000000000007:{cluster}").into_bytes());
        assert_eq!(
            values(layout.entity_writes(&rows, Some(&ties)).unwrap()),
            vec![(b"1".to_vec(), tie("west")), (b"4".to_vec(), tie("west"))]
        );
        // Without ties the later row wins.
        assert_eq!(
            values(layout.entity_writes(&rows, None).unwrap()),
            vec![(b"2".to_vec(), None), (b"4".to_vec(), None)]
        );
    }
}
