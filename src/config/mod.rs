//! Loading of the service file (`config/*.yaml`) and the pipeline files (`connectors/*.yaml`).
//!
//! Each component owns its config struct (next to its code); this module assembles them.
//! Reading YAML and locating problems is [`crate::yaml`]'s job.

mod aggregations;
mod event_source;
mod pipeline;
mod pipeline_file;
mod service;

pub use crate::yaml::{
    issue_at, parse_yaml, read_yaml_file, resolve_path, ConfigError, ConfigIssue, Spanned,
};
pub use aggregations::DEFAULT_FUTURE_SKEW_MS;
pub use pipeline::{load_pipeline_texts, load_pipelines, PipelineConfig};
pub use pipeline_file::{FeatureSelection, PipelineFile};
pub use service::{ServiceConfig, EMBEDDED_DEFAULT_SERVICE_CONFIG};
