//! Deterministic sample feature events for the quickstart, tests and benchmarks.
//!
//! Event `i` belongs to entity `i % entities` and has event time `base_ms + i`; every other
//! field is a simple function of `i` (see [`sample_value`]) so a test can compute exactly
//! what the online and offline stores must hold.

use std::sync::Arc;

use apache_avro::schema::{RecordSchema, Schema, UnionSchema};
use apache_avro::types::Value;

/// Which entity event `i` belongs to.
#[derive(Debug, Clone, Default)]
pub enum KeyDistribution {
    /// Entity `i % entities`: every entity equally often, in turn.
    #[default]
    RoundRobin,
    /// Zipf-skewed: entity `k` (0-based rank) with weight `1 / (k + 1)^s`, drawn from a
    /// hash of `i` so runs are repeatable. Holds the cumulative weights.
    Zipf(Arc<Vec<f64>>),
}

impl KeyDistribution {
    /// Zipf over `entities` with exponent `s` (e.g. 1.1: a few hot entities, a long tail).
    pub fn zipf(entities: u64, s: f64) -> Self {
        let mut total = 0.0;
        let cdf: Vec<f64> = (0..entities.max(1))
            .map(|k| {
                total += 1.0 / ((k + 1) as f64).powf(s);
                total
            })
            .collect();
        KeyDistribution::Zipf(Arc::new(cdf.into_iter().map(|c| c / total).collect()))
    }

    /// The entity of event `i`.
    pub fn entity(&self, i: u64, entities: u64) -> u64 {
        match self {
            KeyDistribution::RoundRobin => i % entities.max(1),
            KeyDistribution::Zipf(cdf) => {
                let u = (splitmix64(i) >> 11) as f64 / (1u64 << 53) as f64;
                cdf.partition_point(|&c| c < u)
                    .min(cdf.len().saturating_sub(1)) as u64
            }
        }
    }
}

/// A well-mixed 64-bit hash of `x` (SplitMix64's finaliser).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How one sample event is made.
#[derive(Debug, Clone)]
pub struct SampleSpec {
    /// Number of distinct entities.
    pub entities: u64,
    /// Event time of event 0, epoch milliseconds.
    pub base_ms: i64,
    /// Milliseconds between consecutive events' times.
    pub time_step_ms: i64,
    /// Entity key fields (get the entity number).
    pub keys: Vec<String>,
    /// Event-time field.
    pub event_time: String,
    /// Which entity each event belongs to.
    pub distribution: KeyDistribution,
    /// Event time = the wall clock when the event is made (for freshness measurements)
    /// instead of `base_ms + i`.
    pub live_event_time: bool,
}

impl SampleSpec {
    /// The entity of event `i`.
    pub fn entity(&self, i: u64) -> u64 {
        self.distribution.entity(i, self.entities)
    }

    /// The event time of event `i`, epoch ms (read the clock once per event).
    pub fn event_time_ms(&self, i: u64) -> i64 {
        if self.live_event_time {
            chrono::Utc::now().timestamp_millis()
        } else {
            self.base_ms.saturating_add(
                i64::try_from(i)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(self.time_step_ms),
            )
        }
    }
}

/// The Avro record for event `i`.
pub fn sample_record(schema: &Schema, spec: &SampleSpec, i: u64) -> Result<Value, String> {
    sample_record_at(schema, spec, i, spec.entity(i), spec.event_time_ms(i))
}

/// The Avro record for event `i` with its entity and event time (epoch ms) already drawn,
/// for callers that need them too (drawing a Zipf entity is a search over the CDF).
pub fn sample_record_at(
    schema: &Schema,
    spec: &SampleSpec,
    i: u64,
    entity: u64,
    event_time: i64,
) -> Result<Value, String> {
    let Schema::Record(RecordSchema { fields, .. }) = schema else {
        return Err("sample events need a record schema".into());
    };
    let mut values = Vec::with_capacity(fields.len());
    for (index, field) in fields.iter().enumerate() {
        let value = if spec.keys.contains(&field.name) {
            key_value(&field.schema, &field.name, entity)?
        } else if field.name == spec.event_time {
            time_value(&field.schema, event_time)?
        } else {
            sample_value(&field.schema, &field.name, index, i)?
        };
        values.push((field.name.clone(), value));
    }
    Ok(Value::Record(values))
}

/// Event indices `start..start + count`, in order or in a deterministic scrambled order
/// (`i → start + (j · step) mod count` with `step` coprime to `count`).
pub fn event_order(start: u64, count: u64, shuffle: bool) -> impl Iterator<Item = u64> {
    let step = if shuffle && count > 2 {
        let mut step = count / 2 + 1;
        while gcd(step, count) != 1 {
            step += 1;
        }
        step
    } else {
        1
    };
    (0..count).map(move |j| start + (j * step) % count.max(1))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The entity key value as text, as it appears in Redis keys (`user-7` or `7`).
pub fn entity_key_text(schema: &Schema, key: &str, entity: u64) -> Option<String> {
    let Schema::Record(record) = schema else {
        return None;
    };
    let field = record.fields.iter().find(|f| f.name == key)?;
    match key_value(&field.schema, key, entity).ok()? {
        Value::String(s) => Some(s),
        Value::Int(n) => Some(n.to_string()),
        Value::Long(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The JSON form of a sample record, as Pulsar's JSON schema writes it (logical types as
/// numbers, unions as their value, enums as symbols).
pub fn to_json(value: &Value) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    Ok(match value {
        Value::Null => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Int(n) | Value::Date(n) | Value::TimeMillis(n) => J::from(*n),
        Value::Long(n)
        | Value::TimestampMillis(n)
        | Value::TimestampMicros(n)
        | Value::TimeMicros(n) => J::from(*n),
        Value::Float(f) => J::from(f64::from(*f)),
        Value::Double(f) => J::from(*f),
        Value::String(s) | Value::Enum(_, s) => J::String(s.clone()),
        Value::Union(_, inner) => to_json(inner)?,
        Value::Array(items) => J::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Record(fields) => J::Object(
            fields
                .iter()
                .map(|(k, v)| Ok((k.clone(), to_json(v)?)))
                .collect::<Result<serde_json::Map<_, _>, String>>()?,
        ),
        other => return Err(format!("sample JSON does not cover {other:?}")),
    })
}

fn key_value(schema: &Schema, name: &str, entity: u64) -> Result<Value, String> {
    match schema {
        Schema::String => Ok(Value::String(format!(
            "{}-{entity}",
            name.trim_end_matches("_id")
        ))),
        Schema::Long => Ok(Value::Long(
            i64::try_from(entity).map_err(|e| e.to_string())?,
        )),
        Schema::Int => Ok(Value::Int(
            i32::try_from(entity).map_err(|e| e.to_string())?,
        )),
        other => Err(format!(
            "entity key `{name}` has unsupported type {other:?}"
        )),
    }
}

fn time_value(schema: &Schema, ms: i64) -> Result<Value, String> {
    match schema {
        Schema::Long => Ok(Value::Long(ms)),
        Schema::TimestampMillis => Ok(Value::TimestampMillis(ms)),
        Schema::TimestampMicros => Ok(Value::TimestampMicros(ms * 1000)),
        other => Err(format!("event time has unsupported type {other:?}")),
    }
}

/// The value of feature field `name` (at position `index`) in event `i`:
/// long `i * (index + 1)`, int `i % 1000 + index`, double/float `i / 4 + index`,
/// boolean `i` even, string `"{name}-{i}"`, bytes `i` as 8 little-endian bytes, timestamps
/// `1_700_000_000 + i` seconds,
/// enum symbol `i % n`, `[null, T]` null when `i % 10 == 9`, arrays the values of `i`,
/// `i + 1` and `i + 2`.
pub fn sample_value(schema: &Schema, name: &str, index: usize, i: u64) -> Result<Value, String> {
    let n = i64::try_from(i).unwrap_or(i64::MAX);
    let idx = i64::try_from(index).unwrap_or(0);
    Ok(match schema {
        Schema::Long => Value::Long(n.wrapping_mul(idx + 1)),
        Schema::Int => Value::Int(i32::try_from(n % 1000 + idx).unwrap_or(0)),
        Schema::Double => Value::Double(n as f64 / 4.0 + idx as f64),
        Schema::Float => Value::Float(n as f32 / 4.0 + idx as f32),
        Schema::Boolean => Value::Boolean(i.is_multiple_of(2)),
        Schema::String => Value::String(format!("{name}-{i}")),
        Schema::Bytes => Value::Bytes(i.to_le_bytes().to_vec()),
        Schema::TimestampMillis => Value::TimestampMillis(1_700_000_000_000 + n * 1000),
        Schema::TimestampMicros => Value::TimestampMicros(1_700_000_000_000_000 + n * 1_000_000),
        Schema::Date => Value::Date(i32::try_from(n % 20_000).unwrap_or(0)),
        Schema::Enum(e) => {
            let position = usize::try_from(i % e.symbols.len().max(1) as u64).unwrap_or(0);
            Value::Enum(
                u32::try_from(position).unwrap_or(0),
                e.symbols.get(position).cloned().unwrap_or_default(),
            )
        }
        Schema::Union(union) => return union_value(union, name, index, i),
        Schema::TimeMillis => Value::TimeMillis(i32::try_from(n % 86_400_000).unwrap_or(0)),
        Schema::TimeMicros => Value::TimeMicros((n * 1000) % 86_400_000_000),
        // Cents: i × 1.23 with two decimal places.
        Schema::Decimal(_) => {
            Value::Decimal(apache_avro::Decimal::from(minimal_be(i128::from(n) * 123)))
        }
        Schema::Uuid(_) => Value::Uuid(uuid::Uuid::from_u128(u128::from(i))),
        Schema::Fixed(fixed) => {
            let mut bytes = i.to_le_bytes().to_vec();
            bytes.resize(fixed.size, 0);
            Value::Fixed(fixed.size, bytes)
        }
        Schema::Map(map) => Value::Map(
            [("a", i), ("b", i + 1)]
                .into_iter()
                .map(|(k, j)| Ok((k.to_string(), sample_value(&map.types, name, index, j)?)))
                .collect::<Result<_, String>>()?,
        ),
        Schema::Record(record) => Value::Record(
            record
                .fields
                .iter()
                .enumerate()
                .map(|(k, f)| Ok((f.name.clone(), sample_value(&f.schema, &f.name, k, i)?)))
                .collect::<Result<_, String>>()?,
        ),
        Schema::Array(array) => Value::Array(
            (0..3)
                .map(|k| sample_value(&array.items, name, index, i + k))
                .collect::<Result<_, _>>()?,
        ),
        other => {
            return Err(format!(
                "field `{name}`: sample events do not cover {other:?}"
            ))
        }
    })
}

/// The shortest big-endian two's complement bytes of `n`, as Avro decimals store them.
fn minimal_be(n: i128) -> Vec<u8> {
    let bytes = n.to_be_bytes();
    let mut start = 0;
    while start < bytes.len() - 1 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        if (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

fn union_value(union: &UnionSchema, name: &str, index: usize, i: u64) -> Result<Value, String> {
    let variants = union.variants();
    let null_at = variants.iter().position(|v| matches!(v, Schema::Null));
    let Some((position, inner)) = variants
        .iter()
        .enumerate()
        .find(|(_, v)| !matches!(v, Schema::Null))
    else {
        return Ok(Value::Null);
    };
    if let Some(null_position) = null_at.filter(|_| i % 10 == 9) {
        return Ok(Value::Union(
            u32::try_from(null_position).unwrap_or(0),
            Box::new(Value::Null),
        ));
    }
    Ok(Value::Union(
        u32::try_from(position).unwrap_or(0),
        Box::new(sample_value(inner, name, index, i)?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffled_order_is_a_permutation() {
        let order: Vec<u64> = event_order(10, 1000, true).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (10..1010).collect::<Vec<_>>());
        assert_ne!(order, sorted);
        assert_eq!(event_order(0, 3, false).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn events_are_deterministic_and_encode() {
        let schema = Schema::parse_str(
            r#"{"type":"record","name":"u","fields":[
              {"name":"user_id","type":"string"},
              {"name":"event_time","type":{"type":"long","logicalType":"timestamp-millis"}},
              {"name":"clicks","type":"long"},
              {"name":"score","type":["null","double"],"default":null}]}"#,
        )
        .unwrap();
        let spec = SampleSpec {
            entities: 10,
            base_ms: 1000,
            time_step_ms: 1,
            keys: vec!["user_id".into()],
            event_time: "event_time".into(),
            distribution: KeyDistribution::RoundRobin,
            live_event_time: false,
        };
        let record = sample_record(&schema, &spec, 19).unwrap();
        assert_eq!(
            record,
            Value::Record(vec![
                ("user_id".into(), Value::String("user-9".into())),
                ("event_time".into(), Value::TimestampMillis(1019)),
                ("clicks".into(), Value::Long(19 * 3)),
                ("score".into(), Value::Union(0, Box::new(Value::Null))),
            ])
        );
        let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
            .build()
            .unwrap();
        assert!(writer.write_value_to_vec(record).is_ok());
        assert_eq!(
            entity_key_text(&schema, "user_id", 9).as_deref(),
            Some("user-9")
        );
    }

    #[test]
    fn zipf_keys_are_skewed_repeatable_and_in_range() {
        let zipf = KeyDistribution::zipf(100_000, 1.1);
        let draws: Vec<u64> = (0..200_000).map(|i| zipf.entity(i, 100_000)).collect();
        assert_eq!(
            draws,
            (0..200_000)
                .map(|i| zipf.entity(i, 100_000))
                .collect::<Vec<_>>()
        );
        assert!(draws.iter().all(|&e| e < 100_000));
        let hottest = draws.iter().filter(|&&e| e == 0).count();
        let tail = draws.iter().filter(|&&e| e >= 50_000).count();
        // Rank 0 holds 1/H(100000, 1.1) = 1/7.43 ≈ 13.5 % of events.
        assert!((25_000..29_000).contains(&hottest), "{hottest}");
        assert!(tail > 0 && tail < hottest, "{tail}");
    }
}
