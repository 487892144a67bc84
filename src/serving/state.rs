//! What the read handlers share: the reader (or why there is none), the request limits,
//! the feature services and where answered rows go.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::body::BodyLimits;
use super::error::ApiError;
use super::{FeatureLog, FeatureReader, ServingConfig};
use crate::metrics::Metrics;

/// Whether online reads can be answered.
pub enum Reads {
    /// Through this reader.
    Ready(Arc<FeatureReader>),
    /// The reader could not start (why).
    Unavailable(String),
}

/// What the read handlers share.
#[derive(Clone)]
pub struct ServingState {
    reads: Arc<Reads>,
    /// Body size and time.
    pub body: BodyLimits,
    /// Most entity rows in one request.
    pub max_entities: usize,
    /// Feature services by name (`view` or `view:feature` entries).
    pub services: Arc<BTreeMap<String, Vec<String>>>,
    /// Where answered rows are counted (`serving_rows_total`).
    pub metrics: Arc<Metrics>,
    /// Where answered rows are logged (`serving.feature_logging`).
    pub log: Option<FeatureLog>,
}

impl ServingState {
    /// The state for `config`'s limits and services, reading through `reads` and counting
    /// answered rows in `metrics`.
    pub fn new(config: &ServingConfig, reads: Reads, metrics: Arc<Metrics>) -> Self {
        Self {
            reads: Arc::new(reads),
            body: BodyLimits {
                max_bytes: config.max_body_bytes,
                timeout: config.request_timeout,
            },
            max_entities: config.max_entities_per_request,
            services: Arc::new(config.feature_services.clone()),
            metrics,
            log: None,
        }
    }

    /// The same, logging answered rows to `log`.
    pub fn with_log(mut self, log: Option<FeatureLog>) -> Self {
        self.log = log;
        self
    }

    /// The reader, or why reads cannot be answered.
    pub fn reader(&self) -> Result<&FeatureReader, ApiError> {
        match self.reads.as_ref() {
            Reads::Ready(reader) => Ok(reader),
            Reads::Unavailable(why) => Err(ApiError::Unavailable(format!(
                "online reads are unavailable: {why}"
            ))),
        }
    }

    /// At most `max_entities` rows, or the refusal.
    pub fn check_entities(&self, count: usize) -> Result<(), ApiError> {
        if count > self.max_entities {
            return Err(ApiError::TooManyEntities {
                count,
                limit: self.max_entities,
            });
        }
        Ok(())
    }
}
