//! Secrets written in the service file: a value given inline (usually `${VAR}` from the
//! environment) or a file holding it (a mounted Kubernetes Secret). One rule for every
//! secret of the process (the Pulsar token, the serving token), so they behave alike.

/// A secret file named in the service file cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {source}")]
pub struct SecretFileError {
    /// The file.
    pub path: String,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// `value` with surrounding blanks removed, or `None` when absent or blank (an unset
/// `${VAR:-}` interpolates to the empty string and means "not configured").
pub fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// The secret: `inline` when set, else the trimmed contents of `file` when set, else `None`.
/// The file is read at each call, so a rotated Secret is picked up by the next caller.
pub fn read(
    inline: &Option<String>,
    file: &Option<String>,
) -> Result<Option<String>, SecretFileError> {
    if let Some(value) = non_empty(inline) {
        return Ok(Some(value.to_string()));
    }
    match non_empty(file) {
        Some(path) => std::fs::read_to_string(path)
            .map(|text| Some(text.trim().to_string()).filter(|t| !t.is_empty()))
            .map_err(|source| SecretFileError {
                path: path.to_string(),
                source,
            }),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_wins_then_file_then_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "from-file\n").unwrap();
        let file = Some(path.display().to_string());
        assert_eq!(
            read(&Some(" inline ".into()), &file).unwrap().as_deref(),
            Some("inline")
        );
        assert_eq!(
            read(&Some(String::new()), &file).unwrap().as_deref(),
            Some("from-file")
        );
        assert_eq!(read(&None, &Some("  ".into())).unwrap(), None);
        let missing = read(&None, &Some("/nonexistent/token".into())).unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/token"),
            "{missing}"
        );
    }
}
