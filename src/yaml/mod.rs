//! Reading YAML config files: environment interpolation, parsing, and every problem as a
//! [`ConfigIssue`] with file, line and key. The bottom layer of configuration: components
//! build their config structs on it, and the `config` module assembles them.

mod error;
mod interpolate;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

pub use error::{ConfigError, ConfigIssue};
pub use interpolate::{interpolate, UnsetVariable};
/// A value with the place it was written, for checks made after parsing.
pub use serde_saphyr::Spanned;

/// Reads and parses one YAML file into `T`, interpolating `${VAR}` from the process
/// environment first.
pub fn read_yaml_file<T: DeserializeOwned>(file: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        ConfigError::single(ConfigIssue {
            file: file.to_path_buf(),
            line: None,
            key: None,
            message: format!("cannot read file: {e}"),
        })
    })?;
    parse_yaml(file, &text)
}

/// Parses YAML `text` (from `file`, for messages) into `T` after env interpolation.
pub fn parse_yaml<T: DeserializeOwned>(file: &Path, text: &str) -> Result<T, ConfigError> {
    let expanded = interpolate(text, |name| std::env::var(name).ok()).map_err(|unset| {
        ConfigError {
            issues: unset
                .into_iter()
                .map(|u| ConfigIssue {
                    file: file.to_path_buf(),
                    line: Some(u.line),
                    key: key_at_line(text, u.line),
                    message: format!(
                        "environment variable `{}` is not set and has no default (write ${{{}:-default}})",
                        u.name, u.name
                    ),
                })
                .collect(),
        }
    })?;
    serde_saphyr::from_str::<T>(&expanded).map_err(|e| {
        let line = e
            .location()
            .map(|l| u32::try_from(l.line()).unwrap_or(u32::MAX));
        let message = first_line(&e.to_string());
        let key = quoted_field(&message).or_else(|| line.and_then(|l| key_at_line(text, l)));
        ConfigError::single(ConfigIssue {
            file: file.to_path_buf(),
            line,
            key,
            message,
        })
    })
}

/// Builds an issue located at a spanned value.
pub fn issue_at<T>(
    file: &Path,
    at: &Spanned<T>,
    key: &str,
    message: impl Into<String>,
) -> ConfigIssue {
    let line = at.referenced.line();
    ConfigIssue {
        file: file.to_path_buf(),
        line: (line > 0).then(|| u32::try_from(line).unwrap_or(u32::MAX)),
        key: Some(key.to_string()),
        message: message.into(),
    }
}

/// Resolves a path written in a config file against `base` unless it is absolute.
pub fn resolve_path(base: &Path, written: &str) -> PathBuf {
    let path = Path::new(written);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

/// The mapping key written on `line` of `text` (`  ttl: 5m` → `ttl`).
fn key_at_line(text: &str, line: u32) -> Option<String> {
    let raw = text
        .lines()
        .nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
    let trimmed = raw.trim_start().trim_start_matches("- ");
    let (key, _) = trimmed.split_once(':')?;
    let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
    (!key.is_empty() && !key.contains(' ')).then(|| key.to_string())
}

/// The first back-quoted name in a serde message (`unknown field `ttl_s`` → `ttl_s`).
fn quoted_field(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    if !(lower.contains("unknown field")
        || lower.contains("missing field")
        || lower.contains("duplicate field"))
    {
        return None;
    }
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}

/// The parser's first line without its own `error: line N column M:` prefix (we print the
/// location ourselves).
fn first_line(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message).trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    if first.starts_with("line ") {
        if let Some((_, rest)) = first.split_once(": ") {
            return rest.to_string();
        }
    }
    first.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sample {
        name: String,
        inner: Inner,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        rows: u64,
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let err = parse_yaml::<Sample>(
            Path::new("p.yaml"),
            "name: a\ninner:\n  rows: 5\n  rowz: 6\n",
        )
        .unwrap_err();
        let issue = &err.issues[0];
        assert_eq!(issue.line, Some(4), "{issue}");
        assert_eq!(issue.key.as_deref(), Some("rowz"), "{issue}");
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let err = parse_yaml::<Sample>(Path::new("p.yaml"), "name: a\ninner:\n  rows: many\n")
            .unwrap_err();
        let issue = &err.issues[0];
        assert_eq!(issue.line, Some(3), "{issue}");
        assert_eq!(issue.key.as_deref(), Some("rows"), "{issue}");
    }

    #[test]
    fn unset_variable_names_line_and_key() {
        let err = parse_yaml::<Sample>(
            Path::new("p.yaml"),
            "name: ${FC_TEST_SURELY_UNSET_VAR}\ninner:\n  rows: 1\n",
        )
        .unwrap_err();
        let issue = &err.issues[0];
        assert_eq!(issue.line, Some(1));
        assert_eq!(issue.key.as_deref(), Some("name"));
        assert!(issue.message.contains("FC_TEST_SURELY_UNSET_VAR"));
    }
}
