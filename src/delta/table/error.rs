//! Why the table could not be used, and kernel work run off the runtime.

use deltalake::DeltaTableError;

/// Why the table could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The store or the log could not be read or written; retrying may help.
    #[error("{what}: {source}")]
    Delta {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: DeltaTableError,
    },
    /// The Delta kernel could not read or write the log; retrying may help.
    #[error("{what}: {source}")]
    Kernel {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: delta_kernel::Error,
    },
    /// The table cannot take this pipeline; retrying will not help.
    #[error("{0}")]
    Refused(String),
}

impl TableError {
    pub(crate) fn delta(what: &'static str) -> impl FnOnce(DeltaTableError) -> Self {
        move |source| Self::Delta { what, source }
    }

    pub(crate) fn kernel(what: &'static str) -> impl FnOnce(delta_kernel::Error) -> Self {
        move |source| Self::Kernel { what, source }
    }
}

/// Runs kernel work (blocking IO through the engine) off the runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, delta_kernel::Error> + Send + 'static,
) -> Result<T, TableError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| TableError::Refused(format!("{what}: task failed: {e}")))?
        .map_err(TableError::kernel(what))
}
