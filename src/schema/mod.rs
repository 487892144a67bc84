//! Schemas: the pipeline's reader schema, the writer schemas registered on the topic, and
//! the decoder that resolves one to the other; which writer versions a pipeline accepts.

mod classify;
mod compatibility;
mod decoder;
mod payload_formats;
mod reader_schema;
mod reason;
#[cfg(test)]
mod tests;
mod topics;
mod writer_check;

pub use compatibility::{read_problems, type_name, Compatibility};
pub use decoder::{DecodeError, DecodeFailure, Decoded, DecoderSpec, PayloadDecoder};
pub use payload_formats::{PayloadError, PayloadFormat};
pub use reader_schema::{ReaderSchema, SchemaError};
pub use reason::DeadLetterReason;
pub use topics::{schema_topic, TopicDecoders};
pub use writer_check::{check_writer, WriterRejected};

/// Column names and Arrow types of the rows decoded with `reader`.
pub fn arrow_schema_of_reader(
    reader: &ReaderSchema,
) -> Result<Vec<(String, arrow::datatypes::DataType)>, PayloadError> {
    Ok(payload_formats::arrow_schema_of(&reader.json)?
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect())
}
