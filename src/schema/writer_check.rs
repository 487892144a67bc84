//! The one check of a registered writer schema against the pipeline's reader schema, used by
//! the decoder (per message version), the start-up check and `schemas check`.

use std::path::Path;

use super::reason::DeadLetterReason;
use super::{Compatibility, PayloadFormat, ReaderSchema};
use crate::pulsar::WriterSchema;

/// Why a writer schema cannot be read with the pipeline's reader schema.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriterRejected {
    /// The registry holds another schema type than the pipeline reads.
    #[error("type {found}, the pipeline reads {expected}")]
    WrongType {
        /// The registered type.
        found: String,
        /// The pipeline's type.
        expected: &'static str,
    },
    /// The registered definition is not a usable Avro record schema.
    #[error("{0}")]
    Unparsable(String),
    /// The strategy finds problems reading the writer's data with the reader schema.
    #[error("not {strategy:?}-compatible with the pipeline schema: {}", problems.join("; "))]
    Incompatible {
        /// The strategy applied.
        strategy: Compatibility,
        /// Each problem, one line each.
        problems: Vec<String>,
    },
}

impl WriterRejected {
    /// The dead-letter reason of a message written with a rejected schema.
    pub fn reason(&self) -> DeadLetterReason {
        match self {
            WriterRejected::WrongType { .. } => DeadLetterReason::UnsupportedSchemaType,
            WriterRejected::Unparsable(_) | WriterRejected::Incompatible { .. } => {
                DeadLetterReason::IncompatibleSchema
            }
        }
    }
}

/// Checks `writer` against `reader` under `strategy`; the parsed writer schema when its data
/// can be read.
pub fn check_writer(
    reader: &ReaderSchema,
    format: PayloadFormat,
    strategy: Compatibility,
    writer: &WriterSchema,
) -> Result<ReaderSchema, WriterRejected> {
    if !writer.kind.eq_ignore_ascii_case(format.registry_type()) {
        return Err(WriterRejected::WrongType {
            found: writer.kind.clone(),
            expected: format.registry_type(),
        });
    }
    let parsed = ReaderSchema::parse(Path::new("<registry>"), &writer.definition)
        .map_err(|e| WriterRejected::Unparsable(e.to_string()))?;
    let problems = strategy.problems(&reader.avro, &parsed.avro);
    if problems.is_empty() {
        Ok(parsed)
    } else {
        Err(WriterRejected::Incompatible { strategy, problems })
    }
}
