//! Rows as Feast's feature server writes them in JSON: each feature's value (see
//! [`ValueStyle::Feast`]) and the event time as Feast writes timestamps. A cached row keeps
//! this text, worked out on its first Feast read, so that later answers copy it instead of
//! decoding protobuf values and formatting times again for every entity of every request.

use std::fmt::Write;

use chrono::SecondsFormat;
use serde_json::Value;

use crate::serving::{FeatureView, ValueStyle};

/// The timestamp Feast gives join key columns and entities not found.
pub const FEAST_EPOCH: &str = "1970-01-01T00:00:00Z";

/// An event time as Feast writes timestamps: RFC 3339 in UTC with `Z`, milliseconds only
/// when there are some (`MessageToDict`'s adaptive precision).
pub fn feast_timestamp(ms: i64) -> String {
    let Some(time) = chrono::DateTime::from_timestamp_millis(ms) else {
        return FEAST_EPOCH.to_string();
    };
    // RFC 3339 written directly: a `format` string is parsed again on every call.
    let precision = if ms.rem_euclid(1000) == 0 {
        SecondsFormat::Secs
    } else {
        SecondsFormat::Millis
    };
    time.to_rfc3339_opts(precision, true)
}

/// A row's values and event time as JSON text, all in one buffer.
#[derive(Debug)]
pub struct FeastJson {
    /// Every feature's value, one after the other, then the event time (quoted).
    text: String,
    /// Per feature of the view, where its value ends in `text`; an empty value is null.
    ends: Box<[usize]>,
}

impl FeastJson {
    /// A row of `view` in Feast's JSON: its stored bytes per feature (`features` of them,
    /// `value` gives each, `None` when not held) and its event time.
    pub(crate) fn of<'r>(
        features: usize,
        value: impl Fn(usize) -> Option<&'r [u8]>,
        event_time_ms: Option<i64>,
        view: &FeatureView,
    ) -> Self {
        let mut text = String::new();
        let ends = (0..features)
            .map(|feature| {
                if let Some(raw) = value(feature) {
                    let value = view.decode(feature, raw, ValueStyle::Feast);
                    if !value.is_null() {
                        push_json(&mut text, &value);
                    }
                }
                text.len()
            })
            .collect();
        if let Some(ms) = event_time_ms {
            push_json(&mut text, &Value::String(feast_timestamp(ms)));
        }
        Self { text, ends }
    }

    /// Feature `index`'s value; `None` when null (not held, or a null value).
    pub fn value(&self, index: usize) -> Option<&str> {
        let end = *self.ends.get(index)?;
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        self.text.get(start..end).filter(|json| !json.is_empty())
    }

    /// The event time as a JSON string; `None` when the row has none.
    pub fn event_time(&self) -> Option<&str> {
        let start = self.ends.last().copied().unwrap_or(0);
        self.text.get(start..).filter(|json| !json.is_empty())
    }
}

fn push_json(text: &mut String, value: &Value) {
    // `Value`'s Display is its compact JSON; writing to a String cannot fail.
    let _ = write!(text, "{value}");
}
