//! Reading YAML config files: environment interpolation, parsing, and every problem as a
//! [`ConfigIssue`] with file, line and key. The bottom layer of configuration: components
//! build their config structs on it, and the `config` module assembles them.

mod error;
mod interpolate;
pub mod recover;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

pub use error::{ConfigError, ConfigIssue};
pub use interpolate::{interpolate, UnsetVariable};
/// A value with the place it was written, for checks made after parsing.
pub use serde_saphyr::Spanned;

/// Reads and parses one YAML file into `T`, interpolating `${VAR}` from the process
/// environment first; every problem of the file is reported.
pub fn read_yaml_file<T: DeserializeOwned>(file: &Path) -> Result<T, ConfigError> {
    into_result(read_yaml_file_recovering(file))
}

/// Parses YAML `text` (from `file`, for messages) into `T` after env interpolation; every
/// problem of the text is reported.
pub fn parse_yaml<T: DeserializeOwned>(file: &Path, text: &str) -> Result<T, ConfigError> {
    into_result(parse_yaml_recovering(file, text))
}

/// Like [`read_yaml_file`], and when the file has problems, also the value its text gives
/// once they are repaired (see [`recover`]), so that the checks made after parsing can
/// report their problems in the same run.
pub fn read_yaml_file_recovering<T: DeserializeOwned>(
    file: &Path,
) -> (Option<T>, Vec<ConfigIssue>) {
    match std::fs::read_to_string(file) {
        Ok(text) => parse_yaml_recovering(file, &text),
        Err(e) => (
            None,
            vec![ConfigIssue {
                file: file.to_path_buf(),
                line: None,
                key: None,
                message: format!("cannot read file: {e}"),
            }],
        ),
    }
}

/// Like [`parse_yaml`], with the repaired value as [`read_yaml_file_recovering`] gives it.
pub fn parse_yaml_recovering<T: DeserializeOwned>(
    file: &Path,
    text: &str,
) -> (Option<T>, Vec<ConfigIssue>) {
    let expanded = match interpolate(text, |name| std::env::var(name).ok()) {
        Ok(expanded) => expanded,
        Err(unset) => {
            let issues = unset
                .into_iter()
                .map(|u| ConfigIssue {
                    file: file.to_path_buf(),
                    line: Some(u.line),
                    key: recover::key_at_line(text, u.line),
                    message: format!(
                        "environment variable `{}` is not set and has no default (write ${{{}:-default}})",
                        u.name, u.name
                    ),
                })
                .collect();
            return (None, issues);
        }
    };
    let (value, problems) = recover::parse_all::<T>(&expanded);
    let issues = problems
        .into_iter()
        .map(|problem| ConfigIssue {
            file: file.to_path_buf(),
            line: problem.line,
            key: problem.key,
            message: problem.message,
        })
        .collect();
    (value, issues)
}

fn into_result<T>((value, issues): (Option<T>, Vec<ConfigIssue>)) -> Result<T, ConfigError> {
    match value {
        Some(value) if issues.is_empty() => Ok(value),
        _ => Err(ConfigError { issues }),
    }
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
