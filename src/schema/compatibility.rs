//! Pulsar's schema compatibility strategies, applied between the pipeline's reader schema
//! and each writer schema version registered on the topic, with field-level reasons.

use apache_avro::schema::{RecordSchema, SchemaKind};
use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::Schema;
use serde::Deserialize;

/// A compatibility strategy, with Pulsar's names and meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Compatibility {
    /// The pipeline schema can read data of the latest writer version.
    #[default]
    Backward,
    /// ... of every writer version.
    BackwardTransitive,
    /// Data of the pipeline schema can be read with the latest writer version.
    Forward,
    /// ... with every writer version.
    ForwardTransitive,
    /// Both directions, latest writer version.
    Full,
    /// Both directions, every writer version.
    FullTransitive,
    /// No check: every version is decoded as far as Avro resolution allows; what cannot be
    /// decoded goes to the dead-letter topic.
    AlwaysCompatible,
    /// No check either (kept for configs written against registries that name it so).
    None,
}

impl Compatibility {
    /// Whether versions older than the latest are checked at start too.
    pub fn transitive(self) -> bool {
        matches!(
            self,
            Compatibility::BackwardTransitive
                | Compatibility::ForwardTransitive
                | Compatibility::FullTransitive
        )
    }

    /// Whether this strategy checks anything.
    pub fn checks(self) -> bool {
        !matches!(self, Compatibility::AlwaysCompatible | Compatibility::None)
    }

    /// The problems that make `writer` unacceptable to a pipeline reading with `reader`;
    /// empty when compatible.
    pub fn problems(self, reader: &Schema, writer: &Schema) -> Vec<String> {
        let backward = || read_problems(writer, reader);
        let forward = || {
            read_problems(reader, writer)
                .into_iter()
                .map(|p| format!("(forward) {p}"))
                .collect::<Vec<_>>()
        };
        match self {
            Compatibility::Backward | Compatibility::BackwardTransitive => backward(),
            Compatibility::Forward | Compatibility::ForwardTransitive => forward(),
            Compatibility::Full | Compatibility::FullTransitive => {
                let mut all = backward();
                all.extend(forward());
                all
            }
            Compatibility::AlwaysCompatible | Compatibility::None => Vec::new(),
        }
    }
}

/// Why data written with `writer` cannot be read with `reader`, one entry per field.
pub fn read_problems(writer: &Schema, reader: &Schema) -> Vec<String> {
    match (writer, reader) {
        (Schema::Record(w), Schema::Record(r)) => record_problems(w, r),
        _ => match SchemaCompatibility::can_read(writer, reader) {
            Ok(_) => Vec::new(),
            Err(e) => vec![format!(
                "{} cannot be read as {}: {e}",
                type_name(writer),
                type_name(reader)
            )],
        },
    }
}

fn record_problems(writer: &RecordSchema, reader: &RecordSchema) -> Vec<String> {
    let mut problems = Vec::new();
    for field in &reader.fields {
        let written = writer
            .lookup
            .get(&field.name)
            .and_then(|i| writer.fields.get(*i))
            .or_else(|| {
                field
                    .aliases
                    .iter()
                    .find_map(|alias| writer.lookup.get(alias).and_then(|i| writer.fields.get(*i)))
            });
        match written {
            Some(w) => {
                if let Err(e) = SchemaCompatibility::can_read(&w.schema, &field.schema) {
                    problems.push(format!(
                        "field {}: {} cannot be read as {} ({e})",
                        field.name,
                        type_name(&w.schema),
                        type_name(&field.schema)
                    ));
                }
            }
            None if field.default.is_none() => problems.push(format!(
                "field {}: missing from the writer schema and has no default",
                field.name
            )),
            None => {}
        }
    }
    problems
}

/// `long`, `string`, `timestamp-millis`, `union [null, double]`, record names…
pub fn type_name(schema: &Schema) -> String {
    match schema {
        Schema::Union(u) => format!(
            "union [{}]",
            u.variants()
                .iter()
                .map(type_name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Schema::Record(r) => format!("record {}", r.name.name()),
        Schema::Enum(e) => format!("enum {}", e.name.name()),
        Schema::Fixed(f) => format!("fixed {}", f.name.name()),
        Schema::Array(a) => format!("array<{}>", type_name(&a.items)),
        Schema::Map(m) => format!("map<{}>", type_name(&m.types)),
        Schema::TimestampMillis => "timestamp-millis".into(),
        Schema::TimestampMicros => "timestamp-micros".into(),
        Schema::TimestampNanos => "timestamp-nanos".into(),
        Schema::LocalTimestampMillis => "local-timestamp-millis".into(),
        Schema::LocalTimestampMicros => "local-timestamp-micros".into(),
        Schema::TimeMillis => "time-millis".into(),
        Schema::TimeMicros => "time-micros".into(),
        other => format!("{:?}", SchemaKind::from(other)).to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(fields: &str) -> Schema {
        Schema::parse_str(&format!(
            r#"{{"type":"record","name":"u","fields":[{fields}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn added_field_with_default_is_backward_compatible() {
        let v1 = schema(r#"{"name":"id","type":"string"},{"name":"n","type":"long"}"#);
        let v2 = schema(
            r#"{"name":"id","type":"string"},{"name":"n","type":"long"},{"name":"x","type":"double","default":0.0}"#,
        );
        assert!(Compatibility::Backward.problems(&v1, &v2).is_empty());
        assert!(Compatibility::Full.problems(&v1, &v2).is_empty());
    }

    #[test]
    fn promotions_read_but_a_changed_type_names_the_field() {
        let reader = schema(r#"{"name":"id","type":"string"},{"name":"ctr_7d","type":"double"}"#);
        let promoted = schema(r#"{"name":"id","type":"string"},{"name":"ctr_7d","type":"int"}"#);
        assert!(Compatibility::Backward
            .problems(&reader, &promoted)
            .is_empty());
        let reader = schema(r#"{"name":"id","type":"string"},{"name":"ctr_7d","type":"string"}"#);
        let changed = schema(r#"{"name":"id","type":"string"},{"name":"ctr_7d","type":"long"}"#);
        let problems = Compatibility::Backward.problems(&reader, &changed);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("field ctr_7d: long cannot be read as string"),
            "{problems:?}"
        );
        assert!(Compatibility::AlwaysCompatible
            .problems(&reader, &changed)
            .is_empty());
    }

    #[test]
    fn a_removed_field_without_default_is_named() {
        let reader = schema(r#"{"name":"id","type":"string"},{"name":"n","type":"long"}"#);
        let writer = schema(r#"{"name":"id","type":"string"}"#);
        assert_eq!(
            Compatibility::Backward.problems(&reader, &writer),
            vec!["field n: missing from the writer schema and has no default".to_string()]
        );
        // Forward: the writer (as reader of our data) lacks nothing it needs.
        assert!(Compatibility::Forward.problems(&reader, &writer).is_empty());
    }
}
