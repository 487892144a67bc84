//! The `native` Redis layout: human-readable keys and values.
//!
//! Key `{prefix}:{pipeline}:{key1}[:{key2}…]`, a hash with one field per feature and
//! `_ts` = event time in epoch milliseconds. Values are text: integers and floats in their
//! shortest round-trip decimal form, booleans `true`/`false`, strings as written, bytes raw,
//! timestamps RFC 3339. A null feature removes its field.

use std::collections::HashMap;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::record::{event_time_millis, RowLayout};

/// Hash field holding the event time of the stored values (epoch milliseconds).
pub const EVENT_TIME_FIELD: &str = "_ts";

/// The newest values of one entity in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityWrite {
    /// The Redis key.
    pub key: String,
    /// Event time of the values, epoch milliseconds.
    pub event_time_ms: i64,
    /// Fields to set.
    pub set: Vec<(String, Vec<u8>)>,
    /// Fields to remove (null features).
    pub delete: Vec<String>,
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

    /// One write per entity: the row with the greatest event time (the later row on a tie).
    /// Rows without a key or event time are skipped; the decoder already rejects them for
    /// non-null schemas.
    pub fn entity_writes(
        &self,
        rows: &RecordBatch,
    ) -> Result<Vec<EntityWrite>, arrow::error::ArrowError> {
        let options = FormatOptions::default().with_null("");
        let column = |name: &str| {
            rows.column_by_name(name).ok_or_else(|| {
                arrow::error::ArrowError::SchemaError(format!("row batch lacks `{name}`"))
            })
        };
        let key_columns = self
            .layout
            .keys
            .iter()
            .map(|k| column(k))
            .collect::<Result<Vec<_>, _>>()?;
        let key_formatters = key_columns
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        let time_column = column(&self.layout.event_time)?;

        let mut newest: HashMap<String, (i64, usize)> = HashMap::with_capacity(rows.num_rows());
        for row in 0..rows.num_rows() {
            if key_columns.iter().any(|c| c.is_null(row)) {
                continue;
            }
            let Some(ts) = event_time_millis(time_column, row) else {
                continue;
            };
            let values: Vec<String> = key_formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            let key = entity_key(&self.prefix, &self.view, &values);
            match newest.get_mut(&key) {
                Some(current) if current.0 > ts => {}
                Some(current) => *current = (ts, row),
                None => {
                    newest.insert(key, (ts, row));
                }
            }
        }

        let features = self
            .layout
            .features
            .iter()
            .map(|name| Ok((name.as_str(), column(name)?)))
            .collect::<Result<Vec<_>, arrow::error::ArrowError>>()?;
        let formatters = features
            .iter()
            .map(|(_, c)| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;

        let mut writes: Vec<EntityWrite> = newest
            .into_iter()
            .map(|(key, (event_time_ms, row))| {
                let mut set = Vec::with_capacity(features.len());
                let mut delete = Vec::new();
                for ((name, column), formatter) in features.iter().zip(&formatters) {
                    if column.is_null(row) {
                        delete.push((*name).to_string());
                        continue;
                    }
                    let value = match column.data_type() {
                        DataType::Binary => column.as_binary::<i32>().value(row).to_vec(),
                        DataType::LargeBinary => column.as_binary::<i64>().value(row).to_vec(),
                        DataType::FixedSizeBinary(_) => {
                            column.as_fixed_size_binary().value(row).to_vec()
                        }
                        _ => formatter.value(row).to_string().into_bytes(),
                    };
                    set.push(((*name).to_string(), value));
                }
                EntityWrite {
                    key,
                    event_time_ms,
                    set,
                    delete,
                }
            })
            .collect();
        writes.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(writes)
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
        let layout = NativeLayout::new(
            "fc",
            "users",
            RowLayout {
                keys: vec!["user_id".into()],
                event_time: "ts".into(),
                features: vec!["ctr".into(), "vip".into()],
            },
        );
        let writes = layout.entity_writes(&rows).unwrap();
        assert_eq!(
            writes,
            vec![
                EntityWrite {
                    key: "fc:users:a".into(),
                    event_time_ms: 30,
                    set: vec![("vip".into(), b"true".to_vec())],
                    delete: vec!["ctr".into()],
                },
                EntityWrite {
                    key: "fc:users:b".into(),
                    event_time_ms: 5,
                    set: vec![
                        ("ctr".into(), b"0.2".to_vec()),
                        ("vip".into(), b"false".to_vec())
                    ],
                    delete: vec![],
                },
            ]
        );
    }
}
