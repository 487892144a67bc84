//! Opening the object store an offline sink writes to.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::path::Path as StorePath;
use object_store::ObjectStore;

use super::config::check_store_url;

/// The store URL could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is malformed or of an unknown scheme.
    #[error("{0}")]
    BadUrl(String),
    /// The local folder could not be created.
    #[error("cannot create {path}: {source}")]
    LocalDir {
        /// Folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// object_store refused the URL or options.
    #[error("cannot open object store {url}: {source}")]
    Open {
        /// URL (without credentials).
        url: String,
        /// Why.
        source: object_store::Error,
    },
}

/// Opens `url`; `file://` paths that are relative resolve against `root`. Other backends
/// take `options` plus the standard `AWS_*`, `GOOGLE_*` and `AZURE_*` environment variables.
pub fn open_store(
    url: &str,
    root: &Path,
    options: &BTreeMap<String, String>,
) -> Result<(Arc<dyn ObjectStore>, StorePath), StoreError> {
    check_store_url(url).map_err(StoreError::BadUrl)?;
    if let Some(path) = url.strip_prefix("file://") {
        let dir = crate::config::resolve_path(root, path);
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::LocalDir {
            path: dir.display().to_string(),
            source,
        })?;
        let store = LocalFileSystem::new_with_prefix(&dir).map_err(|source| StoreError::Open {
            url: url.to_string(),
            source,
        })?;
        return Ok((Arc::new(store), StorePath::default()));
    }
    let parsed = url::Url::parse(url).map_err(|e| StoreError::BadUrl(e.to_string()))?;
    let mut merged: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("AWS_") || k.starts_with("GOOGLE_") || k.starts_with("AZURE_")
        })
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .filter(|(k, _)| k != "aws_endpoint_url")
        .collect();
    merged.extend(
        options
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let (store, prefix) =
        object_store::parse_url_opts(&parsed, merged).map_err(|source| StoreError::Open {
            url: redact(&parsed),
            source,
        })?;
    Ok((Arc::from(store), prefix))
}

fn redact(url: &url::Url) -> String {
    let mut shown = url.clone();
    if shown.password().is_some() {
        let _ = shown.set_password(Some("***"));
    }
    shown.to_string()
}
