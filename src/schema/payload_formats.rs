//! Payload formats (`PayloadFormat`: Avro, JSON) and their row decoders: one per writer
//! schema version, turning payloads into Arrow rows.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow_avro::errors::AvroError;
use arrow_avro::reader::{Decoder as AvroStream, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, SchemaStore};
use serde::Deserialize;

use super::reason::DeadLetterReason;

/// Why a payload (or a run of payloads) did not decode, named where the decoder found out.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The payload ends inside the Avro datum.
    #[error("the payload ends inside the Avro datum{}", detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Truncated {
        /// What the Avro decoder said, if it said something.
        detail: Option<String>,
    },
    /// Bytes follow the datum.
    #[error("trailing bytes after the Avro datum")]
    TrailingBytes,
    /// A JSON payload that is not UTF-8.
    #[error("payload is not UTF-8: {0}")]
    NotUtf8(#[source] std::str::Utf8Error),
    /// A JSON payload that is not an object.
    #[error("payload is not a JSON object")]
    NotJsonObject,
    /// A JSON payload nested deeper than is read.
    #[error("JSON nested {depth}+ levels deep (at most {MAX_JSON_DEPTH} are read)")]
    TooDeep {
        /// The depth reached when reading stopped.
        depth: usize,
    },
    /// The Avro decoder refused the datum.
    #[error(transparent)]
    Avro(#[from] AvroError),
    /// The JSON decoder (or assembling rows) refused it.
    #[error(transparent)]
    Arrow(#[from] ArrowError),
    /// The decoders did not behave as expected (a run gave another number of rows).
    #[error("{0}")]
    Decoder(String),
}

impl PayloadError {
    /// The dead-letter reason when the error names one by itself; `None` when the payload
    /// must be looked at (e.g. which field is null).
    pub fn reason(&self) -> Option<DeadLetterReason> {
        match self {
            PayloadError::Truncated { .. } => Some(DeadLetterReason::Truncated),
            PayloadError::TrailingBytes => Some(DeadLetterReason::TrailingBytes),
            PayloadError::NotUtf8(_)
            | PayloadError::NotJsonObject
            | PayloadError::TooDeep { .. } => Some(DeadLetterReason::Undecodable),
            PayloadError::Avro(_) | PayloadError::Arrow(_) | PayloadError::Decoder(_) => None,
        }
    }
}

/// An Avro decoder error as the payload error it stands for.
fn avro_payload_error(error: AvroError) -> PayloadError {
    match error {
        AvroError::EOF(detail) => PayloadError::Truncated {
            detail: Some(detail),
        },
        AvroError::NeedMoreData(_) | AvroError::NeedMoreDataRange(_) => {
            PayloadError::Truncated { detail: None }
        }
        // The decoder reads the bytes after a complete datum as the next datum's header.
        AvroError::ParseError(e) if e.starts_with("Missing magic") => PayloadError::TrailingBytes,
        other => PayloadError::Avro(other),
    }
}

/// How payloads are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PayloadFormat {
    /// Pulsar AVRO schema: one raw Avro datum per message.
    #[default]
    Avro,
    /// Pulsar JSON schema: one JSON object per message, described by an Avro record schema.
    Json,
}

impl PayloadFormat {
    /// The schema type name Pulsar's registry uses.
    pub fn registry_type(self) -> &'static str {
        match self {
            PayloadFormat::Avro => "AVRO",
            PayloadFormat::Json => "JSON",
        }
    }
}

/// Decodes payloads of one writer schema version into rows of the reader schema.
pub trait RowDecoder: Send {
    /// Takes one payload; an error means this payload cannot be decoded.
    fn feed(&mut self, payload: &[u8]) -> Result<(), PayloadError>;
    /// The rows fed since the last flush (exactly one per payload).
    fn flush(&mut self) -> Result<Option<RecordBatch>, PayloadError>;
}

/// Builds a row decoder for `format` reading payloads written with `writer_json`.
pub fn build_row_decoder(
    format: PayloadFormat,
    writer_json: &str,
    reader_json: &str,
    arrow_schema: &SchemaRef,
    capacity: usize,
) -> Result<Box<dyn RowDecoder>, PayloadError> {
    match format {
        PayloadFormat::Avro => Ok(Box::new(AvroRows::new(writer_json, reader_json, capacity)?)),
        PayloadFormat::Json => Ok(Box::new(JsonRows::new(arrow_schema, capacity)?)),
    }
}

/// The Arrow schema `arrow-avro` derives from an Avro reader schema.
pub fn arrow_schema_of(reader_json: &str) -> Result<SchemaRef, PayloadError> {
    Ok(avro_stream(reader_json, reader_json, 1)?.0.schema())
}

/// Raw Avro datums through `arrow-avro`, with Avro schema resolution writer → reader.
///
/// `arrow-avro` 59 (the version `deltalake` builds on) streams single-object encoded datums
/// only; Pulsar payloads are raw datums. Each payload is therefore preceded by the 10-byte
/// single-object header of its writer schema, fed as a separate slice so that the payload
/// itself is never copied.
struct AvroRows {
    stream: AvroStream,
    header: [u8; 10],
    done: Vec<RecordBatch>,
}

impl AvroRows {
    fn new(writer_json: &str, reader_json: &str, capacity: usize) -> Result<Self, PayloadError> {
        let (stream, fingerprint) = avro_stream(writer_json, reader_json, capacity)?;
        Ok(Self {
            stream,
            header: single_object_header(fingerprint)?,
            done: Vec::new(),
        })
    }
}

/// `C3 01` then the little-endian Rabin fingerprint (Avro single-object encoding).
fn single_object_header(fingerprint: Fingerprint) -> Result<[u8; 10], PayloadError> {
    let Fingerprint::Rabin(rabin) = fingerprint else {
        return Err(PayloadError::Decoder(format!(
            "unexpected writer fingerprint {fingerprint:?}"
        )));
    };
    let mut header = [0u8; 10];
    header[..2].copy_from_slice(&[0xC3, 0x01]);
    header[2..].copy_from_slice(&rabin.to_le_bytes());
    Ok(header)
}

impl RowDecoder for AvroRows {
    fn feed(&mut self, payload: &[u8]) -> Result<(), PayloadError> {
        if self.stream.batch_is_full() {
            if let Some(batch) = self.stream.flush().map_err(avro_payload_error)? {
                self.done.push(batch);
            }
        }
        match self.stream.decode(&self.header) {
            Ok(n) if n == self.header.len() => {}
            Ok(_) => {
                return Err(PayloadError::Decoder(
                    "the Avro decoder did not take the datum header".into(),
                ))
            }
            Err(e) => return Err(avro_payload_error(e)),
        }
        match self.stream.decode(payload) {
            Ok(n) if n == payload.len() => Ok(()),
            Ok(0) if !payload.is_empty() => Err(PayloadError::Truncated { detail: None }),
            Ok(_) => Err(PayloadError::TrailingBytes),
            Err(e) => Err(avro_payload_error(e)),
        }
    }

    fn flush(&mut self) -> Result<Option<RecordBatch>, PayloadError> {
        if let Some(batch) = self.stream.flush().map_err(avro_payload_error)? {
            self.done.push(batch);
        }
        concat(std::mem::take(&mut self.done))
    }
}

fn avro_stream(
    writer_json: &str,
    reader_json: &str,
    capacity: usize,
) -> Result<(AvroStream, Fingerprint), PayloadError> {
    let mut store = SchemaStore::new();
    let fingerprint = store.register(AvroSchema::new(writer_json.to_string()))?;
    let stream = ReaderBuilder::new()
        .with_reader_schema(AvroSchema::new(reader_json.to_string()))
        .with_writer_schema_store(store)
        .with_active_fingerprint(fingerprint)
        .with_batch_size(capacity.max(1))
        .build_decoder()?;
    Ok((stream, fingerprint))
}

/// JSON objects through `arrow-json`, typed by the reader schema; unknown fields are ignored.
struct JsonRows {
    stream: arrow_json::reader::Decoder,
    done: Vec<RecordBatch>,
}

/// Deepest JSON nesting read; feature rows need a handful of levels.
pub const MAX_JSON_DEPTH: usize = 64;

/// `Some(depth)` as soon as `json`'s arrays/objects nest deeper than `limit` (strings and
/// their escapes skipped); `None` when they do not.
fn nesting_beyond(json: &[u8], limit: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in json {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some(depth);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

impl JsonRows {
    fn new(schema: &SchemaRef, capacity: usize) -> Result<Self, PayloadError> {
        let stream = arrow_json::ReaderBuilder::new(schema.clone())
            .with_batch_size(capacity.max(1))
            .build_decoder()?;
        Ok(Self {
            stream,
            done: Vec::new(),
        })
    }
}

impl RowDecoder for JsonRows {
    fn feed(&mut self, payload: &[u8]) -> Result<(), PayloadError> {
        let text = std::str::from_utf8(payload).map_err(PayloadError::NotUtf8)?;
        if !text.trim_start().starts_with('{') {
            return Err(PayloadError::NotJsonObject);
        }
        // Decoders below recurse per level: a payload nested 100,000 deep overflowed the
        // stack and took the process down (the bad-input corpus found it).
        if let Some(depth) = nesting_beyond(payload, MAX_JSON_DEPTH) {
            return Err(PayloadError::TooDeep { depth });
        }
        let mut rest = payload;
        while !rest.is_empty() {
            let consumed = self.stream.decode(rest)?;
            if consumed == 0 {
                // The batch is full: move it aside and go on.
                match self.stream.flush()? {
                    Some(batch) => self.done.push(batch),
                    None => {
                        return Err(PayloadError::Decoder(
                            "JSON decoder made no progress".into(),
                        ))
                    }
                }
            }
            rest = &rest[consumed..];
        }
        // Terminates the value so the next payload starts a new row.
        self.stream.decode(b"\n")?;
        Ok(())
    }

    fn flush(&mut self) -> Result<Option<RecordBatch>, PayloadError> {
        if let Some(batch) = self.stream.flush()? {
            self.done.push(batch);
        }
        concat(std::mem::take(&mut self.done))
    }
}

fn concat(batches: Vec<RecordBatch>) -> Result<Option<RecordBatch>, PayloadError> {
    match batches.len() {
        0 => Ok(None),
        1 => Ok(batches.into_iter().next()),
        _ => {
            let schema = batches[0].schema();
            Ok(Some(arrow::compute::concat_batches(&schema, &batches)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float64Type, Int64Type};

    use super::*;

    #[test]
    fn avro_resolution_promotes_int_to_long_and_double() {
        let writer = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"},{"name":"b","type":"int"}]}"#;
        let reader = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"},{"name":"b","type":"double"},
            {"name":"c","type":"string","default":"none"}]}"#;
        let arrow = arrow_schema_of(reader).unwrap();
        let mut decoder =
            build_row_decoder(PayloadFormat::Avro, writer, reader, &arrow, 4).unwrap();
        // a = 21 (zigzag 42), b = -3 (zigzag 5)
        decoder.feed(&[42, 5]).unwrap();
        let batch = decoder.flush().unwrap().unwrap();
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 21);
        assert_eq!(batch.column(1).as_primitive::<Float64Type>().value(0), -3.0);
        assert_eq!(batch.column(2).as_string::<i32>().value(0), "none");
    }
}

#[cfg(test)]
mod depth_tests {
    use super::nesting_beyond;

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        assert_eq!(nesting_beyond(br#"{"a": [1, {"b": 2}]}"#, 3), None);
        assert_eq!(nesting_beyond(br#"{"a": [1, {"b": 2}]}"#, 2), Some(3));
        assert_eq!(nesting_beyond(br#"{"a": "[[[[[[\"[[["}"#, 1), None);
        let deep = format!("{{\"a\": {}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(nesting_beyond(deep.as_bytes(), 64), Some(65));
    }
}
