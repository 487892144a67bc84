//! A batch's join key values written as text, row by row, into a caller's buffer: the one
//! way the sinks, the tiles and the training sets spell an entity, with no allocation per
//! row.

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};

/// The join key columns of one batch, ready to be written row by row.
pub struct KeyText<'a> {
    columns: Vec<(&'a ArrayRef, Text<'a>)>,
}

/// How one key column's values become text: strings are copied as they are (the common
/// key, and most of the cost of formatting), anything else through Arrow's formatter.
enum Text<'a> {
    Strings(&'a StringArray),
    Formatted(ArrayFormatter<'a>),
}

impl<'a> KeyText<'a> {
    /// The key columns `columns`, in the pipeline's key order.
    pub fn new(columns: Vec<&'a ArrayRef>) -> Result<Self, ArrowError> {
        let options = FormatOptions::default().with_null("");
        let columns = columns
            .into_iter()
            .map(|c| {
                let text = match c.as_string_opt::<i32>() {
                    Some(strings) => Text::Strings(strings),
                    None => Text::Formatted(ArrayFormatter::try_new(c.as_ref(), &options)?),
                };
                Ok((c, text))
            })
            .collect::<Result<Vec<_>, ArrowError>>()?;
        Ok(KeyText { columns })
    }

    /// `true` when some key of `row` is null (such a row names no entity).
    pub fn has_null(&self, row: usize) -> bool {
        self.columns.iter().any(|(c, _)| c.is_null(row))
    }

    /// Appends `row`'s key values to `out`, each after `separator` but the first.
    pub fn append(&self, row: usize, separator: &str, out: &mut String) -> Result<(), ArrowError> {
        for (i, (_, text)) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push_str(separator);
            }
            match text {
                Text::Strings(strings) => out.push_str(strings.value(row)),
                Text::Formatted(formatter) => formatter
                    .value(row)
                    .write(out)
                    .map_err(|e| ArrowError::ExternalError(Box::new(e)))?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};

    use super::*;

    #[test]
    fn rows_are_written_with_their_separator_and_nulls_are_told() {
        let users: ArrayRef = Arc::new(StringArray::from(vec![Some("u1"), None]));
        let shops: ArrayRef = Arc::new(Int64Array::from(vec![7, 8]));
        let keys = KeyText::new(vec![&users, &shops]).expect("formatters");
        let mut out = String::from("prefix:");
        keys.append(0, ":", &mut out).expect("written");
        assert_eq!(out, "prefix:u1:7");
        assert!(!keys.has_null(0));
        assert!(keys.has_null(1));
    }
}
