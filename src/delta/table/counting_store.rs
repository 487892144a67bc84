//! Counts the requests an offline store receives, by operation and by target (the table's log
//! or its data files), as `offline_store_requests_total`: on S3 requests are what a table costs,
//! and the counts show that start-up reads the log only.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::metrics::StoreRequestLabels;

/// An object store that counts what passes through it.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    pipeline: String,
    counts: Family<StoreRequestLabels, Counter>,
}

impl CountingStore {
    /// Counts `inner`'s requests for `pipeline` in `counts`.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        pipeline: &str,
        counts: Family<StoreRequestLabels, Counter>,
    ) -> Self {
        Self {
            inner,
            pipeline: pipeline.to_string(),
            counts,
        }
    }

    fn count(&self, operation: &'static str, path: Option<&Path>) {
        // A listing outside the log lists data files (that is what start-up must not do).
        let target = match path {
            Some(path) if path.as_ref().contains("_delta_log") => "log",
            _ => "data",
        };
        self.counts
            .get_or_create(&StoreRequestLabels {
                pipeline: self.pipeline.clone(),
                operation,
                target,
            })
            .inc();
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.count("put", Some(location));
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.count("put", Some(location));
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.count(if options.head { "head" } else { "get" }, Some(location));
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.count("get", Some(location));
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let (pipeline, counts) = (self.pipeline.clone(), self.counts.clone());
        let counted = locations
            .inspect(move |path| {
                let target = match path {
                    Ok(p) if p.as_ref().contains("_delta_log") => "log",
                    _ => "data",
                };
                counts
                    .get_or_create(&StoreRequestLabels {
                        pipeline: pipeline.clone(),
                        operation: "delete",
                        target,
                    })
                    .inc();
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.count("list", prefix);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.count("list", prefix);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.count("list", prefix);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.count("copy", Some(to));
        self.inner.copy_opts(from, to, options).await
    }
}
