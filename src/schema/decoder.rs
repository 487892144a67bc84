//! Decodes Pulsar Avro payloads (raw datums) into Arrow record batches of the pipeline's
//! reader schema, resolving each writer schema version through Avro schema resolution.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow_avro::reader::{Decoder, DecoderMode, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, SchemaStore};

use super::{ReaderSchema, RegistryError, SchemaRegistry};
use crate::source::SourceMessage;

/// A message that cannot be decoded, and why; it goes to the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeFailure {
    /// Index of the message in the batch handed to [`AvroDecoder::decode`].
    pub index: usize,
    /// Short machine-friendly reason (`undecodable`, `unknown_schema_version`, ...).
    pub reason: &'static str,
    /// Human detail.
    pub detail: String,
}

/// Decoding could not run: the registry is unreachable (retry) or rows did not assemble.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The schema registry could not be asked for a writer schema.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Decoded rows did not fit the output schema (a bug, not bad input).
    #[error("assembling decoded rows: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

/// The result of decoding one batch of messages.
#[derive(Debug)]
pub struct Decoded {
    /// Rows of the messages that decoded, in message order, with the output columns.
    pub rows: RecordBatch,
    /// For each row, the index of its message in the input batch.
    pub row_messages: Vec<usize>,
    /// Messages that did not decode.
    pub failures: Vec<DecodeFailure>,
}

/// Resolves writer versions to the reader schema, one cached Arrow decoder per version.
pub struct AvroDecoder {
    topic: String,
    reader: ReaderSchema,
    registry: SchemaRegistry,
    decoders: HashMap<Option<i64>, Result<Decoder, (&'static str, String)>>,
    columns: Vec<String>,
    output_schema: SchemaRef,
    capacity: usize,
}

impl AvroDecoder {
    /// A decoder producing `columns` (in that order) of `reader` for messages of `topic`.
    pub fn new(
        topic: &str,
        reader: ReaderSchema,
        registry: SchemaRegistry,
        columns: Vec<String>,
        capacity: usize,
    ) -> Result<Self, String> {
        let probe = build_decoder(&reader.json, &reader.json, 1)?;
        let full = probe.schema();
        let fields = columns
            .iter()
            .map(|name| {
                full.field_with_name(name)
                    .map(|f| f.clone().with_metadata(HashMap::new()))
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            topic: topic.to_string(),
            reader,
            registry,
            decoders: HashMap::new(),
            columns,
            output_schema: Arc::new(Schema::new(fields)),
            capacity: capacity.max(1),
        })
    }

    /// The Arrow schema of [`Decoded::rows`].
    pub fn output_schema(&self) -> SchemaRef {
        self.output_schema.clone()
    }

    /// Decodes `messages`; only a registry that cannot be reached is an error (retry).
    pub async fn decode(&mut self, messages: &[SourceMessage]) -> Result<Decoded, DecodeError> {
        for message in messages {
            self.ensure_decoder(message.schema_version).await?;
        }
        let mut parts: Vec<(RecordBatch, Vec<usize>)> = Vec::new();
        let mut failures = Vec::new();
        let mut start = 0;
        while start < messages.len() {
            let version = messages[start].schema_version;
            let end = messages[start..]
                .iter()
                .position(|m| m.schema_version != version)
                .map_or(messages.len(), |offset| start + offset);
            self.decode_run(messages, start..end, &mut parts, &mut failures);
            start = end;
        }
        let mut batches = Vec::with_capacity(parts.len());
        let mut row_messages = Vec::with_capacity(messages.len());
        for (batch, indices) in parts {
            batches.push(self.project(&batch)?);
            row_messages.extend(indices);
        }
        let rows = arrow::compute::concat_batches(&self.output_schema, &batches)?;
        Ok(Decoded {
            rows,
            row_messages,
            failures,
        })
    }

    async fn ensure_decoder(&mut self, version: Option<i64>) -> Result<(), RegistryError> {
        if self.decoders.contains_key(&version) {
            return Ok(());
        }
        let built = match version {
            None => build_decoder(&self.reader.json, &self.reader.json, self.capacity)
                .map_err(|e| ("incompatible_schema", e)),
            Some(v) => match self.registry.writer_schema(&self.topic, v).await {
                Ok(writer) if writer.kind.eq_ignore_ascii_case("AVRO") => {
                    build_decoder(&writer.definition, &self.reader.json, self.capacity).map_err(
                        |e| {
                            (
                                "incompatible_schema",
                                format!(
                            "writer schema version {v} cannot be read as the pipeline schema: {e}"
                        ),
                            )
                        },
                    )
                }
                Ok(writer) => Err((
                    "unsupported_schema_type",
                    format!(
                        "schema version {v} is of type {}, expected AVRO",
                        writer.kind
                    ),
                )),
                Err(e) if e.is_transient() => return Err(e),
                Err(e) => Err((
                    "unknown_schema_version",
                    format!("schema version {v} is not in the registry: {e}"),
                )),
            },
        };
        self.decoders.insert(version, built);
        Ok(())
    }

    fn decode_run(
        &mut self,
        messages: &[SourceMessage],
        run: std::ops::Range<usize>,
        parts: &mut Vec<(RecordBatch, Vec<usize>)>,
        failures: &mut Vec<DecodeFailure>,
    ) {
        let version = messages[run.start].schema_version;
        let mut decoder = match self.decoders.remove(&version) {
            Some(Ok(decoder)) => decoder,
            Some(Err((reason, detail))) => {
                failures.extend(run.map(|index| DecodeFailure {
                    index,
                    reason,
                    detail: detail.clone(),
                }));
                self.decoders.insert(version, Err((reason, detail)));
                return;
            }
            None => return,
        };
        let mut fed: Vec<usize> = Vec::new();
        for index in run {
            let payload = &messages[index].payload;
            let outcome = if decoder.batch_is_full() {
                flush_into(&mut decoder, &mut fed, parts)
            } else {
                Ok(())
            }
            .and_then(|()| match decoder.decode(payload) {
                Ok(n) if n == payload.len() => Ok(()),
                Ok(n) => Err(format!(
                    "{} trailing bytes after the Avro datum",
                    payload.len() - n
                )),
                Err(e) => Err(e.to_string()),
            });
            match outcome {
                Ok(()) => fed.push(index),
                Err(detail) => {
                    failures.push(DecodeFailure {
                        index,
                        reason: "undecodable",
                        detail,
                    });
                    // A failed datum may have left a partial row behind: start a clean
                    // decoder and replay the rows this one held.
                    decoder = match self.rebuild(version) {
                        Ok(fresh) => fresh,
                        Err(reason) => {
                            failures.extend(fed.drain(..).map(|i| DecodeFailure {
                                index: i,
                                reason: "undecodable",
                                detail: reason.clone(),
                            }));
                            continue;
                        }
                    };
                    for &replayed in &fed {
                        // These decoded once already; same bytes, same writer schema.
                        let _ = decoder.decode(&messages[replayed].payload);
                    }
                }
            }
        }
        if let Err(detail) = flush_into(&mut decoder, &mut fed, parts) {
            failures.extend(fed.drain(..).map(|index| DecodeFailure {
                index,
                reason: "undecodable",
                detail: detail.clone(),
            }));
        }
        self.decoders.insert(version, Ok(decoder));
    }

    fn rebuild(&self, version: Option<i64>) -> Result<Decoder, String> {
        let writer = match version {
            None => Some(self.reader.json.clone()),
            Some(v) => self.registry.cached_definition(&self.topic, v),
        };
        match writer {
            Some(writer) => build_decoder(&writer, &self.reader.json, self.capacity),
            None => Err("writer schema vanished from cache".into()),
        }
    }

    fn project(&self, batch: &RecordBatch) -> Result<RecordBatch, arrow::error::ArrowError> {
        let columns = self
            .columns
            .iter()
            .map(|name| {
                batch.column_by_name(name).cloned().ok_or_else(|| {
                    arrow::error::ArrowError::SchemaError(format!("decoded rows lack `{name}`"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new(self.output_schema.clone(), columns)
    }
}

fn flush_into(
    decoder: &mut Decoder,
    fed: &mut Vec<usize>,
    parts: &mut Vec<(RecordBatch, Vec<usize>)>,
) -> Result<(), String> {
    match decoder.flush() {
        Ok(Some(batch)) => {
            parts.push((batch, std::mem::take(fed)));
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn build_decoder(writer_json: &str, reader_json: &str, capacity: usize) -> Result<Decoder, String> {
    let mut store = SchemaStore::new();
    let fingerprint = store
        .register(AvroSchema::new(writer_json.to_string()))
        .map_err(|e| e.to_string())?;
    ReaderBuilder::new()
        .with_reader_schema(AvroSchema::new(reader_json.to_string()))
        .with_writer_schema_store(store)
        .with_active_fingerprint(fingerprint)
        .with_decoder_mode(DecoderMode::UnframedDatum)
        .with_batch_size(capacity)
        .build_decoder()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use apache_avro::types::Value;
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    use pulsar::message::proto::MessageIdData;

    use super::*;
    use crate::source::MessagePosition;

    const SCHEMA: &str = r#"{"type":"record","name":"r","fields":[
        {"name":"id","type":"string"},{"name":"n","type":"long"}]}"#;

    fn message(payload: Vec<u8>) -> SourceMessage {
        SourceMessage {
            position: MessagePosition {
                topic: "persistent://public/default/t".into(),
                id: MessageIdData::default(),
                batch_size: None,
            },
            payload,
            schema_version: None,
            key: None,
            publish_time_ms: 0,
            properties: Vec::new(),
        }
    }

    fn datum(schema: &apache_avro::Schema, id: &str, n: i64) -> Vec<u8> {
        let writer = apache_avro::writer::datum::GenericDatumWriter::builder(schema)
            .build()
            .unwrap();
        writer
            .write_value_to_vec(Value::Record(vec![
                ("id".into(), Value::String(id.into())),
                ("n".into(), Value::Long(n)),
            ]))
            .unwrap()
    }

    #[tokio::test]
    async fn bad_payloads_fail_alone_and_good_rows_keep_their_order() {
        let reader = ReaderSchema::parse(std::path::Path::new("t.avsc"), SCHEMA).unwrap();
        let registry = SchemaRegistry::new(reqwest::Client::new(), "http://127.0.0.1:9");
        let mut decoder = AvroDecoder::new(
            "persistent://public/default/t",
            reader.clone(),
            registry,
            vec!["n".into(), "id".into()],
            16,
        )
        .unwrap();
        let good = |n| message(datum(&reader.avro, &format!("e{n}"), n));
        let mut truncated = datum(&reader.avro, "long-enough-id", 7);
        truncated.truncate(5);
        let mut trailing = datum(&reader.avro, "x", 8);
        trailing.extend_from_slice(&[1, 2, 3]);
        let messages = vec![
            good(1),
            message(vec![
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ]),
            good(2),
            message(truncated),
            message(trailing),
            good(3),
        ];
        let decoded = decoder.decode(&messages).await.unwrap();
        assert_eq!(decoded.row_messages, vec![0, 2, 5]);
        let n = decoded.rows.column(0).as_primitive::<Int64Type>();
        assert_eq!(n.values(), &[1, 2, 3]);
        assert_eq!(decoded.rows.column(1).as_string::<i32>().value(2), "e3");
        let failed: Vec<(usize, &str)> = decoded
            .failures
            .iter()
            .map(|f| (f.index, f.reason))
            .collect();
        assert_eq!(
            failed,
            vec![(1, "undecodable"), (3, "undecodable"), (4, "undecodable")]
        );
        assert!(
            decoded.failures[2].detail.contains("trailing bytes"),
            "{:?}",
            decoded.failures[2]
        );
    }
}
