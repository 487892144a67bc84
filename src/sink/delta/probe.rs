//! The offline store's readiness check.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use object_store::ObjectStore;

use crate::health::Probe;

/// An object store answers a listing of the pipeline's folder.
pub struct ObjectStoreProbe {
    /// Pipeline whose offline store this is.
    pub pipeline: String,
    /// The store rooted at the pipeline's table folder.
    pub store: Arc<dyn ObjectStore>,
}

#[async_trait]
impl Probe for ObjectStoreProbe {
    fn name(&self) -> String {
        format!("offline store of `{}`", self.pipeline)
    }

    /// Lists the table's log after every key it can hold (`zzzz` sorts after the commits,
    /// checkpoints and `_last_checkpoint`; a `~` would be percent-encoded and sort first):
    /// one request that fails when the store or bucket is unreachable and returns nothing when
    /// it is fine, whatever the table's size.
    async fn check(&self) -> Result<(), String> {
        let log = object_store::path::Path::from("_delta_log");
        let after = object_store::path::Path::from("_delta_log/zzzz");
        let mut listing = self.store.list_with_offset(Some(&log), &after);
        match listing.next().await {
            Some(Err(e)) => Err(e.to_string()),
            _ => Ok(()),
        }
    }
}
