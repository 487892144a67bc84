//! Why a feature read cannot be answered: the caller asked for something wrong, or Redis
//! failed.

use crate::redis::tiles::TileError;
use crate::redis::RedisSetupError;

/// A query that cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// No online pipeline of that name.
    #[error("no online feature view `{0}`")]
    UnknownView(String),
    /// The entity does not name every join key of the view.
    #[error("view `{view}` is keyed by {keys}; missing `{missing}`")]
    MissingKey {
        /// View.
        view: String,
        /// Its join keys.
        keys: String,
        /// The key not given.
        missing: String,
    },
    /// A join key value that does not fit its type.
    #[error("view `{view}`: {reason}")]
    BadKey {
        /// View.
        view: String,
        /// Why.
        reason: String,
    },
    /// A feature that the view does not have.
    #[error("view `{view}` has no feature `{feature}`")]
    UnknownFeature {
        /// View.
        view: String,
        /// Feature asked for.
        feature: String,
    },
    /// The Redis client could not be set up.
    #[error(transparent)]
    Setup(#[from] RedisSetupError),
    /// Redis failed.
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// An entity's stored aggregation tiles do not read back.
    #[error(transparent)]
    Tiles(#[from] TileError),
}

impl QueryError {
    /// Whether the caller asked for something wrong (HTTP 4xx) rather than Redis failing.
    pub fn is_client_error(&self) -> bool {
        !matches!(
            self,
            QueryError::Redis(_) | QueryError::Setup(_) | QueryError::Tiles(_)
        )
    }
}
