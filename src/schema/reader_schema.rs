//! The reader schema: the Avro record a pipeline expects, loaded from `schemas/`.

use std::path::{Path, PathBuf};

use apache_avro::schema::{RecordField, RecordSchema};
use apache_avro::Schema;

use super::compatibility::type_name;

/// Problems with a schema file or with a field a pipeline names.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The file could not be read.
    #[error("cannot read schema file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid Avro schema.
    #[error("{path} is not a valid Avro schema: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// The schema is valid but not a record.
    #[error("{path}: the top-level schema must be an Avro record")]
    NotRecord {
        /// The file.
        path: PathBuf,
    },
    /// A named field is missing.
    #[error("field `{field}` is not in the schema (fields: {available})")]
    MissingField {
        /// The field asked for.
        field: String,
        /// The fields the schema has.
        available: String,
    },
    /// A named field has a type that cannot serve its role.
    #[error("field `{field}` has type {found}; {expected}")]
    WrongType {
        /// The field.
        field: String,
        /// Its Avro type.
        found: String,
        /// What the role needs.
        expected: &'static str,
    },
}

/// A parsed Avro record schema with its canonical JSON.
#[derive(Debug, Clone)]
pub struct ReaderSchema {
    /// The schema as parsed.
    pub avro: Schema,
    /// The schema JSON as written (compacted), given to decoders and producers.
    pub json: String,
}

impl ReaderSchema {
    /// Reads and parses an `.avsc` file.
    pub fn load(path: &Path) -> Result<Self, SchemaError> {
        let text = std::fs::read_to_string(path).map_err(|source| SchemaError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses schema JSON; `path` only names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, SchemaError> {
        let avro = Schema::parse_str(text).map_err(|e| SchemaError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if !matches!(avro, Schema::Record(_)) {
            return Err(SchemaError::NotRecord {
                path: path.to_path_buf(),
            });
        }
        // Not the Parsing Canonical Form: it strips logical types (timestamps, decimals).
        let json = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value) => value.to_string(),
            Err(_) => text.to_string(),
        };
        Ok(Self { avro, json })
    }

    /// Rabin fingerprint (hex) of the schema's Parsing Canonical Form.
    pub fn fingerprint(&self) -> String {
        match arrow_avro::schema::AvroSchema::new(self.json.clone())
            .fingerprint(arrow_avro::schema::FingerprintAlgorithm::Rabin)
        {
            Ok(arrow_avro::schema::Fingerprint::Rabin(value)) => format!("{value:016x}"),
            Ok(other) => format!("{other:?}"),
            Err(_) => String::new(),
        }
    }

    fn record(&self) -> &RecordSchema {
        match &self.avro {
            Schema::Record(record) => record,
            // `parse` admits records only.
            _ => unreachable!("ReaderSchema always holds a record"),
        }
    }

    /// Field names in schema order.
    pub fn field_names(&self) -> impl Iterator<Item = String> + '_ {
        self.record().fields.iter().map(|f| f.name.clone())
    }

    /// Whether the record has a field of that name.
    pub fn has_field(&self, name: &str) -> bool {
        self.record().lookup.contains_key(name)
    }

    fn field(&self, name: &str) -> Result<&RecordField, SchemaError> {
        let record = self.record();
        record
            .lookup
            .get(name)
            .and_then(|i| record.fields.get(*i))
            .ok_or_else(|| SchemaError::MissingField {
                field: name.to_string(),
                available: record
                    .fields
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// An entity key must be a non-null string, int or long.
    pub fn check_key_field(&self, name: &str) -> Result<(), SchemaError> {
        let field = self.field(name)?;
        match field.schema {
            Schema::String | Schema::Int | Schema::Long | Schema::Uuid(_) => Ok(()),
            ref other => Err(SchemaError::WrongType {
                field: name.to_string(),
                found: type_name(other),
                expected: "an entity key must be a non-null string, int or long",
            }),
        }
    }

    /// The event time must be a non-null `long` (epoch millis) or timestamp logical type.
    pub fn check_event_time_field(&self, name: &str) -> Result<(), SchemaError> {
        let field = self.field(name)?;
        match field.schema {
            Schema::Long
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros => Ok(()),
            ref other => Err(SchemaError::WrongType {
                field: name.to_string(),
                found: type_name(other),
                expected: "the event time must be a non-null long (epoch millis) or timestamp-millis/micros",
            }),
        }
    }
}
