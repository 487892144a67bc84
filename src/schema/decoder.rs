//! Decodes message payloads into Arrow record batches of the pipeline's reader schema. Each
//! writer schema version gets its own row decoder, checked once against the pipeline's
//! compatibility strategy; payloads that cannot be decoded are reported one by one.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Schema, SchemaRef};

use super::classify::{classify, Expectations};
use super::payload_formats::{
    arrow_schema_of, build_row_decoder, PayloadError, PayloadFormat, RowDecoder,
};
use super::reason::DeadLetterReason;
use super::{check_writer, Compatibility, ReaderSchema};
use crate::pulsar::AdminError;
use crate::pulsar::SchemaRegistry;
use crate::record::event_time_millis;
use crate::source::SourceMessage;

/// A message that cannot be decoded, and why; it goes to the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeFailure {
    /// Index of the message in the batch handed to [`PayloadDecoder::decode`].
    pub index: usize,
    /// Short machine-friendly reason (`undecodable`, `incompatible_schema`, ...).
    pub reason: DeadLetterReason,
    /// Human detail.
    pub detail: String,
}

/// Decoding could not run: the registry is unreachable (retry) or rows did not assemble.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The schema registry could not be asked for a writer schema.
    #[error(transparent)]
    Registry(#[from] AdminError),
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

/// What the decoder needs to know about the pipeline.
#[derive(Debug, Clone)]
pub struct DecoderSpec {
    /// Topic (for registry look-ups).
    pub topic: String,
    /// The pipeline's reader schema.
    pub reader: ReaderSchema,
    /// Payload format.
    pub format: PayloadFormat,
    /// Strategy applied to each writer version.
    pub compatibility: Compatibility,
    /// Output columns, in order.
    pub columns: Vec<String>,
    /// Entity key columns (named in dead-letter reasons).
    pub entity_keys: Vec<String>,
    /// Event-time column: rows whose event time is outside 1970..=9999 are rejected.
    pub event_time: String,
    /// Rows with NaN or ±Infinity in a float/double column are rejected.
    pub reject_non_finite: bool,
    /// Rows stamped more than this many ms after their message's publish time are rejected
    /// (`entity.max_future_skew`); `None` accepts any.
    pub max_future_skew_ms: Option<i64>,
    /// Most messages per batch.
    pub capacity: usize,
}

type Failed = (DeadLetterReason, String);

/// Turns payloads into rows, one checked writer schema per version.
pub struct PayloadDecoder {
    spec: DecoderSpec,
    registry: SchemaRegistry,
    full_schema: SchemaRef,
    output_schema: SchemaRef,
    /// Each writer version seen, checked and parsed once: naming why a payload failed reads
    /// the parsed writer schema (parsing it again per failing payload nearly doubled the
    /// cost of a bad payload).
    writers: HashMap<Option<i64>, Result<ReaderSchema, Failed>>,
    /// Row decoders kept between batches, per writer version (building one parses both
    /// schemas); a decoder that failed is dropped, not reused.
    row_decoders: RefCell<HashMap<Option<i64>, Box<dyn RowDecoder>>>,
}

/// A clone starts without cached row decoders (they are not `Clone`).
impl Clone for PayloadDecoder {
    fn clone(&self) -> Self {
        Self {
            spec: self.spec.clone(),
            registry: self.registry.clone(),
            full_schema: self.full_schema.clone(),
            output_schema: self.output_schema.clone(),
            writers: self.writers.clone(),
            row_decoders: RefCell::new(HashMap::new()),
        }
    }
}

/// Whether row `row` of a Float32/Float64 column is null or a finite number.
fn is_finite_or_null(column: &dyn Array, row: usize) -> bool {
    if column.is_null(row) {
        return true;
    }
    match column.data_type() {
        DataType::Float32 => column.as_primitive::<Float32Type>().value(row).is_finite(),
        DataType::Float64 => column.as_primitive::<Float64Type>().value(row).is_finite(),
        _ => true,
    }
}

/// Latest event time accepted (end of year 9999), epoch milliseconds.
const MAX_EVENT_TIME_MS: i64 = 253_402_300_799_999;

impl PayloadDecoder {
    /// A decoder for `spec`, asking `registry` for writer versions it has not seen.
    pub fn new(spec: DecoderSpec, registry: SchemaRegistry) -> Result<Self, PayloadError> {
        let full_schema = arrow_schema_of(&spec.reader.json)?;
        let fields = spec
            .columns
            .iter()
            .map(|name| {
                full_schema
                    .field_with_name(name)
                    .map(|f| f.clone().with_metadata(HashMap::new()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            spec,
            registry,
            full_schema,
            output_schema: Arc::new(Schema::new(fields)),
            writers: HashMap::new(),
            row_decoders: RefCell::new(HashMap::new()),
        })
    }

    /// The same decoder for another topic: its writer versions are fetched and checked anew.
    pub fn for_topic(&self, topic: &str) -> Self {
        let mut spec = self.spec.clone();
        spec.topic = topic.to_string();
        Self {
            spec,
            registry: self.registry.clone(),
            full_schema: self.full_schema.clone(),
            output_schema: self.output_schema.clone(),
            writers: HashMap::new(),
            row_decoders: RefCell::new(HashMap::new()),
        }
    }

    /// The topic whose registered schemas this decoder reads.
    pub fn topic(&self) -> &str {
        &self.spec.topic
    }

    /// The Arrow schema of [`Decoded::rows`].
    pub fn output_schema(&self) -> SchemaRef {
        self.output_schema.clone()
    }

    /// Fetches and checks every version registered on the topic. Returns the versions'
    /// verdicts (`Err` with the reasons for incompatible ones), oldest first.
    pub async fn check_registered_versions(
        &mut self,
    ) -> Result<Vec<(i64, Result<(), String>)>, AdminError> {
        let versions = self.registry.all_versions(&self.spec.topic).await?;
        let mut verdicts = Vec::with_capacity(versions.len());
        for version in versions {
            self.ensure_writer(Some(version.version)).await?;
            let verdict = match self.writers.get(&Some(version.version)) {
                Some(Err((_, detail))) => Err(detail.clone()),
                _ => Ok(()),
            };
            verdicts.push((version.version, verdict));
        }
        Ok(verdicts)
    }

    /// The event-time column of the decoded rows.
    pub fn event_time(&self) -> &str {
        &self.spec.event_time
    }

    /// The strategy this decoder applies.
    pub fn compatibility(&self) -> Compatibility {
        self.spec.compatibility
    }

    /// Decodes `messages`; only a registry that cannot be reached is an error (retry).
    pub async fn decode(&mut self, messages: &[SourceMessage]) -> Result<Decoded, DecodeError> {
        for message in messages {
            self.ensure_writer(message.schema_version).await?;
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
            let (batch, indices) =
                self.reject_bad_event_times(batch, indices, messages, &mut failures)?;
            batches.push(self.project(&batch)?);
            row_messages.extend(indices);
        }
        failures.sort_by_key(|f| f.index);
        let rows = arrow::compute::concat_batches(&self.output_schema, &batches)?;
        Ok(Decoded {
            rows,
            row_messages,
            failures,
        })
    }

    /// Fetches and checks a writer version the first time it is seen.
    async fn ensure_writer(&mut self, version: Option<i64>) -> Result<(), AdminError> {
        if self.writers.contains_key(&version) {
            return Ok(());
        }
        let checked = match version {
            None => Ok(self.spec.reader.clone()),
            Some(v) => match self.registry.writer_schema(&self.spec.topic, v).await {
                Ok(writer) => check_writer(
                    &self.spec.reader,
                    self.spec.format,
                    self.spec.compatibility,
                    &writer,
                )
                .map_err(|rejected| (rejected.reason(), format!("schema version {v}: {rejected}"))),
                Err(e) if e.is_transient() => return Err(e),
                Err(e) => Err((
                    DeadLetterReason::UnknownSchemaVersion,
                    format!("schema version {v}: {e}"),
                )),
            },
        };
        if let Err((reason, detail)) = &checked {
            // Its messages' dead-letter log line carries this reason and detail (at WARN).
            tracing::debug!(topic = %self.spec.topic, ?version, reason = reason.as_str(), %detail, "writer schema rejected");
        }
        self.writers.insert(version, checked);
        Ok(())
    }

    fn row_decoder(&self, writer_json: &str) -> Result<Box<dyn RowDecoder>, PayloadError> {
        build_row_decoder(
            self.spec.format,
            writer_json,
            &self.spec.reader.json,
            &self.full_schema,
            self.spec.capacity,
        )
    }

    /// Decodes one run of messages of the same writer version: all at once, and only if
    /// that fails, one by one so that each bad payload is named and the rest still pass.
    fn decode_run(
        &self,
        messages: &[SourceMessage],
        run: std::ops::Range<usize>,
        parts: &mut Vec<(RecordBatch, Vec<usize>)>,
        failures: &mut Vec<DecodeFailure>,
    ) {
        let version = messages[run.start].schema_version;
        let writer = match self.writers.get(&version) {
            Some(Ok(writer)) => writer,
            Some(Err((reason, detail))) => {
                failures.extend(run.map(|index| DecodeFailure {
                    index,
                    reason: *reason,
                    detail: detail.clone(),
                }));
                return;
            }
            None => return,
        };
        let decode_all = |indices: &[usize]| -> Result<Option<RecordBatch>, PayloadError> {
            let cached = self.row_decoders.borrow_mut().remove(&version);
            let mut decoder = match cached {
                Some(decoder) => decoder,
                None => self.row_decoder(&writer.json)?,
            };
            for &index in indices {
                decoder.feed(&messages[index].payload)?;
            }
            let batch = decoder.flush()?;
            let rows = batch.as_ref().map_or(0, RecordBatch::num_rows);
            if rows != indices.len() {
                return Err(PayloadError::Decoder(format!(
                    "{} payload(s) gave {rows} row(s)",
                    indices.len()
                )));
            }
            self.row_decoders.borrow_mut().insert(version, decoder);
            Ok(batch)
        };
        let indices: Vec<usize> = run.collect();
        match decode_all(&indices) {
            Ok(Some(batch)) => parts.push((batch, indices)),
            Ok(None) => {}
            Err(_) => {
                for index in indices {
                    match decode_all(&[index]) {
                        Ok(Some(batch)) => parts.push((batch, vec![index])),
                        Ok(None) => {}
                        Err(error) => {
                            let (reason, detail) =
                                self.classify(writer, &messages[index].payload, &error);
                            failures.push(DecodeFailure {
                                index,
                                reason,
                                detail,
                            });
                        }
                    }
                }
            }
        }
    }

    /// The reason the error names, or else what looking at the payload finds (a null field,
    /// a missing key), or `undecodable`.
    fn classify(
        &self,
        writer: &ReaderSchema,
        payload: &[u8],
        error: &PayloadError,
    ) -> (DeadLetterReason, String) {
        if let Some(reason) = error.reason() {
            return (reason, error.to_string());
        }
        let error = error.to_string();
        classify(
            &Expectations {
                format: self.spec.format,
                writer: &writer.avro,
                reader: &self.spec.reader.avro,
                keys: &self.spec.entity_keys,
                event_time: &self.spec.event_time,
            },
            payload,
            &error,
        )
    }

    fn reject_bad_event_times(
        &self,
        batch: RecordBatch,
        indices: Vec<usize>,
        messages: &[SourceMessage],
        failures: &mut Vec<DecodeFailure>,
    ) -> Result<(RecordBatch, Vec<usize>), DecodeError> {
        let Some(column) = batch.column_by_name(&self.spec.event_time) else {
            return Ok((batch, indices));
        };
        let floats: Vec<(&str, &dyn Array)> = if self.spec.reject_non_finite {
            self.spec
                .columns
                .iter()
                .filter_map(|name| Some((name.as_str(), batch.column_by_name(name)?.as_ref())))
                .filter(|(_, c)| matches!(c.data_type(), DataType::Float32 | DataType::Float64))
                .collect()
        } else {
            Vec::new()
        };
        let mut keep = Vec::with_capacity(batch.num_rows());
        let mut kept = Vec::with_capacity(indices.len());
        for (row, index) in indices.into_iter().enumerate() {
            let event_time = event_time_millis(column, row);
            let time_ok = event_time.is_some_and(|ms| (0..=MAX_EVENT_TIME_MS).contains(&ms));
            let non_finite = floats
                .iter()
                .find(|(_, c)| !is_finite_or_null(*c, row))
                .map(|(name, _)| *name);
            let published = messages
                .get(index)
                .map_or(0, |m| i64::try_from(m.publish_time_ms).unwrap_or(i64::MAX));
            let ahead = match (event_time, self.spec.max_future_skew_ms) {
                (Some(at), Some(skew)) if at > published.saturating_add(skew) => {
                    Some((at - published, skew))
                }
                _ => None,
            };
            match (time_ok, non_finite, ahead) {
                (false, _, _) => failures.push(DecodeFailure {
                    index,
                    reason: DeadLetterReason::InvalidEventTime,
                    detail: format!(
                        "event time `{}` is missing or outside 1970-01-01..9999-12-31",
                        self.spec.event_time
                    ),
                }),
                (true, Some(name), _) => failures.push(DecodeFailure {
                    index,
                    reason: DeadLetterReason::NonFiniteValue,
                    detail: format!("field {name} is NaN or infinite (schema.reject_non_finite)"),
                }),
                (true, None, Some((ahead, skew))) => failures.push(DecodeFailure {
                    index,
                    reason: DeadLetterReason::FutureEventTime,
                    detail: format!(
                        "event time `{}` is {ahead} ms after the publish time, more than entity.max_future_skew ({skew} ms)",
                        self.spec.event_time
                    ),
                }),
                (true, None, None) => kept.push(index),
            }
            keep.push(time_ok && non_finite.is_none() && ahead.is_none());
        }
        if kept.len() == keep.len() {
            return Ok((batch, kept));
        }
        let filtered = arrow::compute::filter_record_batch(&batch, &BooleanArray::from(keep))?;
        Ok((filtered, kept))
    }

    fn project(&self, batch: &RecordBatch) -> Result<RecordBatch, arrow::error::ArrowError> {
        let columns = self
            .spec
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
