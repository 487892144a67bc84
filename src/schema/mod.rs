//! Schemas: the pipeline's reader schema, the writer schemas registered on the topic, and
//! the decoder that resolves one to the other; which writer versions a pipeline accepts.

mod classify;
mod compatibility;
mod decoder;
mod reader_schema;
mod registry;
mod row_decoders;

pub use compatibility::{read_problems, type_name, Compatibility};
pub use decoder::{DecodeError, DecodeFailure, Decoded, DecoderSpec, PayloadDecoder};
pub use reader_schema::{ReaderSchema, SchemaError};
pub use registry::{decode_schema_version, RegistryError, SchemaRegistry, WriterSchema};
pub use row_decoders::PayloadFormat;
