//! Configuration errors that point at the file, line and key at fault.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem found in a configuration or schema file.
///
/// Displayed as `file:line: key: message` so editors and terminals can jump to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// File the problem is in.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<u32>,
    /// Dotted path of the key at fault (e.g. `offline.url`), when known.
    pub key: Option<String>,
    /// What is wrong and, where possible, what to do.
    pub message: String,
}

impl ConfigIssue {
    /// A problem with key `key` of `file` whose line is not known (a check across keys, or
    /// of a value after interpolation).
    pub fn at_key(file: &Path, key: &str, message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            line: None,
            key: Some(key.to_string()),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// All problems found while loading configuration; loading reports every issue it can
/// find instead of stopping at the first.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    /// The individual problems, in file order.
    pub issues: Vec<ConfigIssue>,
}

impl ConfigError {
    /// An error made of a single issue.
    pub fn single(issue: ConfigIssue) -> Self {
        Self {
            issues: vec![issue],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}
