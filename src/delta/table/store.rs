//! Opening the object store an offline sink writes to, and the Delta log store of a table in
//! it.
//!
//! The store is built here (with `object_store`, from the URL and options) and handed to
//! `deltalake`, so every backend `object_store` knows works without `deltalake`'s own cloud
//! crates. Commits use a conditional put (`PutMode::Create`: `If-None-Match: *` on S3, a link
//! that fails when the file exists on local disk), which is what makes two writers' commits of
//! the same version exclusive.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use deltalake::logstore::{default_logstore, LogStoreRef, StorageConfig};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as StorePath;
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;
use url::Url;

use crate::delta::check_store_url;

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

/// An offline store: a bucket (or local folder) and the prefix pipelines' tables live under.
#[derive(Debug, Clone)]
pub struct TableRoot {
    /// The store at the bucket's root (local disk: the file system's root).
    pub root: Arc<dyn ObjectStore>,
    /// Where the prefix is inside `root`.
    pub prefix: StorePath,
    /// The prefix as a URL ending in `/`.
    base: Url,
}

/// Where one pipeline's table lives.
#[derive(Debug, Clone)]
pub struct TableLocation {
    /// The table's URL (`…/<pipeline>/`).
    pub url: Url,
    /// The store rooted at the table's folder.
    pub store: Arc<dyn ObjectStore>,
    /// The Delta log store of the table.
    pub log_store: LogStoreRef,
}

impl TableRoot {
    /// Opens `url`; `file://` paths that are relative resolve against `root`. Other backends
    /// take `options` plus the standard `AWS_*`, `GOOGLE_*` and `AZURE_*` environment variables.
    pub fn open(
        url: &str,
        root: &Path,
        options: &BTreeMap<String, String>,
    ) -> Result<Self, StoreError> {
        check_store_url(url).map_err(StoreError::BadUrl)?;
        if let Some(path) = url.strip_prefix("file://") {
            let dir = crate::yaml::resolve_path(root, path);
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::LocalDir {
                path: dir.display().to_string(),
                source,
            })?;
            let dir = dir.canonicalize().map_err(|source| StoreError::LocalDir {
                path: dir.display().to_string(),
                source,
            })?;
            let base = Url::from_directory_path(&dir)
                .map_err(|()| StoreError::BadUrl(format!("`{}` is not absolute", dir.display())))?;
            let prefix = StorePath::from_url_path(base.path()).map_err(|e| {
                StoreError::BadUrl(format!("`{}` is not a valid path: {e}", dir.display()))
            })?;
            return Ok(Self {
                root: Arc::new(LocalFileSystem::new()),
                prefix,
                base,
            });
        }
        let parsed = Url::parse(url).map_err(|e| StoreError::BadUrl(e.to_string()))?;
        if parsed.scheme() == "memory" {
            let prefix = StorePath::from_url_path(parsed.path())
                .map_err(|e| StoreError::BadUrl(e.to_string()))?;
            return Ok(Self {
                root: Arc::new(InMemory::new()),
                base: directory_url(&parsed),
                prefix,
            });
        }
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
        Ok(Self {
            root: Arc::from(store),
            prefix,
            base: directory_url(&parsed),
        })
    }

    /// Counts every request this store makes from now on in `metrics`, for `pipeline`.
    pub fn counted(mut self, metrics: &crate::metrics::Metrics, pipeline: &str) -> Self {
        self.root = Arc::new(super::counting_store::CountingStore::new(
            self.root,
            pipeline,
            metrics.offline_store_requests.clone(),
        ));
        self
    }

    /// The table of `pipeline` (`<prefix>/<pipeline>`).
    pub fn table(&self, pipeline: &str) -> Result<TableLocation, StoreError> {
        let url = self
            .base
            .join(&format!("{pipeline}/"))
            .map_err(|e| StoreError::BadUrl(format!("table `{pipeline}`: {e}")))?;
        if let Ok(dir) = url.to_file_path() {
            // The Delta kernel refuses a local table location that does not exist yet.
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::LocalDir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let folder = self.prefix.clone().join(pipeline);
        let store: Arc<dyn ObjectStore> = Arc::new(PrefixStore::new(self.root.clone(), folder));
        let log_store = default_logstore(
            store.clone(),
            self.root.clone(),
            &url,
            &StorageConfig::default(),
        );
        Ok(TableLocation {
            url,
            store,
            log_store,
        })
    }

    /// The store URL as shown to users (no credentials).
    pub fn display_url(&self) -> String {
        redact(&self.base)
    }
}

fn directory_url(url: &Url) -> Url {
    let mut base = url.clone();
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    base
}

fn redact(url: &Url) -> String {
    let mut shown = url.clone();
    if shown.password().is_some() {
        let _ = shown.set_password(Some("***"));
    }
    shown.to_string()
}
