//! Why a message went to the dead-letter topic: carried from where decoding failed to the
//! `reason` property and the `dead_lettered_total` label.

use std::fmt;

/// The reason of one dead-lettered message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterReason {
    /// The payload is not a datum of the writer schema (nothing more specific was found).
    Undecodable,
    /// The payload ends inside the datum.
    Truncated,
    /// Bytes are left after the datum.
    TrailingBytes,
    /// A field the reader schema requires is null.
    NullInNonNullField,
    /// A field the reader schema requires is absent (JSON).
    MissingField,
    /// An entity key is null or absent.
    MissingEntityKey,
    /// The event time is null or absent.
    MissingEventTime,
    /// The event time is out of range.
    InvalidEventTime,
    /// The event time is further after the publish time than the pipeline allows.
    FutureEventTime,
    /// A float feature is NaN or infinite and the pipeline refuses those.
    NonFiniteValue,
    /// The writer schema cannot be read with the pipeline's reader schema.
    IncompatibleSchema,
    /// The registered schema is of another type (e.g. JSON for an Avro pipeline).
    UnsupportedSchemaType,
    /// The registry does not know the message's schema version.
    UnknownSchemaVersion,
}

impl DeadLetterReason {
    /// The machine-friendly name written to the topic and the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::Undecodable => "undecodable",
            DeadLetterReason::Truncated => "truncated",
            DeadLetterReason::TrailingBytes => "trailing_bytes",
            DeadLetterReason::NullInNonNullField => "null_in_non_null_field",
            DeadLetterReason::MissingField => "missing_field",
            DeadLetterReason::MissingEntityKey => "missing_entity_key",
            DeadLetterReason::MissingEventTime => "missing_event_time",
            DeadLetterReason::InvalidEventTime => "invalid_event_time",
            DeadLetterReason::FutureEventTime => "future_event_time",
            DeadLetterReason::NonFiniteValue => "non_finite_value",
            DeadLetterReason::IncompatibleSchema => "incompatible_schema",
            DeadLetterReason::UnsupportedSchemaType => "unsupported_schema_type",
            DeadLetterReason::UnknownSchemaVersion => "unknown_schema_version",
        }
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
