//! Schemas: the pipeline's reader schema, the writer schemas registered on the topic, and
//! the decoder that resolves one to the other.

mod avro_decoder;
mod reader_schema;
mod registry;

pub use avro_decoder::{AvroDecoder, DecodeError, DecodeFailure, Decoded};
pub use reader_schema::{ReaderSchema, SchemaError};
pub use registry::{decode_schema_version, RegistryError, SchemaRegistry, WriterSchema};
