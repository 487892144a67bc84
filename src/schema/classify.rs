//! Names why one payload could not be decoded, for the dead-letter topic's `reason`.

use apache_avro::types::Value;
use apache_avro::Schema;

use super::payload_formats::PayloadFormat;
use super::reason::DeadLetterReason;

/// What the classifier needs about the pipeline.
pub struct Expectations<'a> {
    /// Payload format.
    pub format: PayloadFormat,
    /// The writer schema the payload claims (Avro JSON).
    pub writer: &'a Schema,
    /// The reader schema.
    pub reader: &'a Schema,
    /// Entity key fields.
    pub keys: &'a [String],
    /// Event-time field.
    pub event_time: &'a str,
}

/// `(reason, detail)` for a payload that failed with `error`.
pub fn classify(
    expect: &Expectations<'_>,
    payload: &[u8],
    error: &str,
) -> (DeadLetterReason, String) {
    let found = match expect.format {
        PayloadFormat::Avro => classify_avro(expect, payload, error),
        PayloadFormat::Json => classify_json(expect, payload),
    };
    found.unwrap_or((DeadLetterReason::Undecodable, error.to_string()))
}

fn classify_avro(
    expect: &Expectations<'_>,
    payload: &[u8],
    error: &str,
) -> Option<(DeadLetterReason, String)> {
    if error.starts_with("EOF")
        || error.contains("NeedMoreData")
        || error.contains("Unexpected EOF")
    {
        return Some((
            DeadLetterReason::Truncated,
            format!(
                "payload of {} bytes ends inside the datum: {error}",
                payload.len()
            ),
        ));
    }
    if error.contains("trailing bytes") {
        return Some((DeadLetterReason::TrailingBytes, error.to_string()));
    }
    let mut reader = payload;
    let value = match apache_avro::reader::datum::GenericDatumReader::builder(expect.writer)
        .build()
        .ok()?
        .read_value(&mut reader)
    {
        Ok(value) => value,
        Err(e) => {
            // The Arrow decoder says "bad varint" at a cut; Avro's own reader says EOF.
            let why = format!("{e:?}");
            if why.contains("UnexpectedEof") || why.contains("failed to fill whole buffer") {
                return Some((
                    DeadLetterReason::Truncated,
                    format!(
                        "payload of {} bytes ends inside the datum ({e})",
                        payload.len()
                    ),
                ));
            }
            return None;
        }
    };
    let Value::Record(fields) = value else {
        return None;
    };
    null_in_non_null(expect, fields.iter().map(|(k, v)| (k.as_str(), is_null(v))))
}

fn classify_json(expect: &Expectations<'_>, payload: &[u8]) -> Option<(DeadLetterReason, String)> {
    let value: serde_json::Value = match serde_json::from_slice(payload) {
        Ok(value) => value,
        Err(e) => {
            return Some((
                DeadLetterReason::Undecodable,
                format!("not valid JSON: {e}"),
            ))
        }
    };
    let serde_json::Value::Object(object) = value else {
        return Some((
            DeadLetterReason::Undecodable,
            "payload is not a JSON object".into(),
        ));
    };
    let Schema::Record(reader) = expect.reader else {
        return None;
    };
    for field in &reader.fields {
        if nullable(&field.schema) || object.contains_key(&field.name) || field.default.is_some() {
            continue;
        }
        let reason = if expect.keys.contains(&field.name) {
            DeadLetterReason::MissingEntityKey
        } else if field.name == expect.event_time {
            DeadLetterReason::MissingEventTime
        } else {
            DeadLetterReason::MissingField
        };
        return Some((
            reason,
            format!("field `{}` is missing and has no default", field.name),
        ));
    }
    null_in_non_null(
        expect,
        object.iter().map(|(k, v)| (k.as_str(), v.is_null())),
    )
}

fn null_in_non_null<'a>(
    expect: &Expectations<'_>,
    fields: impl Iterator<Item = (&'a str, bool)>,
) -> Option<(DeadLetterReason, String)> {
    let Schema::Record(reader) = expect.reader else {
        return None;
    };
    for (name, null) in fields {
        if !null {
            continue;
        }
        let Some(field) = reader.lookup.get(name).and_then(|i| reader.fields.get(*i)) else {
            continue;
        };
        if !nullable(&field.schema) {
            return Some((
                DeadLetterReason::NullInNonNullField,
                format!("field `{name}` is null but the pipeline schema does not allow null"),
            ));
        }
    }
    None
}

fn is_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Union(_, inner) => is_null(inner),
        _ => false,
    }
}

fn nullable(schema: &Schema) -> bool {
    match schema {
        Schema::Null => true,
        Schema::Union(u) => u.variants().iter().any(|v| matches!(v, Schema::Null)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(fields: &str) -> Schema {
        Schema::parse_str(&format!(
            r#"{{"type":"record","name":"r","fields":[{fields}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn names_the_reason() {
        let reader = schema(
            r#"{"name":"id","type":"string"},{"name":"t","type":"long"},{"name":"n","type":"long"}"#,
        );
        let writer = schema(
            r#"{"name":"id","type":"string"},{"name":"t","type":"long"},{"name":"n","type":["null","long"]}"#,
        );
        let keys = vec!["id".to_string()];
        let avro = Expectations {
            format: PayloadFormat::Avro,
            writer: &writer,
            reader: &reader,
            keys: &keys,
            event_time: "t",
        };
        // id "a", t 1, n = union branch 0 (null)
        assert_eq!(
            classify(&avro, &[2, b'a', 2, 0], "branch not resolvable")
                .0
                .as_str(),
            "null_in_non_null_field"
        );
        assert_eq!(
            classify(&avro, &[2], "EOF: Unexpected EOF reading bytes")
                .0
                .as_str(),
            "truncated"
        );
        assert_eq!(
            classify(&avro, &[0xff; 12], "bad varint").0.as_str(),
            "undecodable"
        );
        let json = Expectations {
            format: PayloadFormat::Json,
            writer: &reader,
            reader: &reader,
            keys: &keys,
            event_time: "t",
        };
        assert_eq!(
            classify(&json, br#"{"t":1,"n":2}"#, "").0.as_str(),
            "missing_entity_key"
        );
        assert_eq!(
            classify(&json, br#"{"id":"a","n":2}"#, "").0.as_str(),
            "missing_event_time"
        );
        assert_eq!(
            classify(&json, br#"{"id":"a","t":1,"n":null}"#, "")
                .0
                .as_str(),
            "null_in_non_null_field"
        );
        assert_eq!(classify(&json, b"{not json", "").0.as_str(), "undecodable");
    }
}
