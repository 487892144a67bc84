//! The service file: where the shared services are and how the process serves HTTP.

use std::path::Path;

use serde::Deserialize;

use super::{parse_yaml, read_yaml_file, ConfigError};
use crate::sink::delta::ObjectStoreServiceConfig;
use crate::sink::redis::RedisServiceConfig;
use crate::source::pulsar::PulsarServiceConfig;

/// The service config compiled into the binary (`config/default.yaml`): local services on
/// 127.0.0.1 and the offline store on local disk, each overridable from the environment.
pub const EMBEDDED_DEFAULT_SERVICE_CONFIG: &str = include_str!("../../config/default.yaml");

/// Process-wide settings shared by all pipelines.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// The Pulsar cluster to consume from.
    pub pulsar: PulsarServiceConfig,
    /// The Redis online store.
    pub redis: RedisServiceConfig,
    /// Defaults for the offline object store.
    pub offline: ObjectStoreServiceConfig,
    /// The HTTP endpoint (health and metrics).
    pub http: HttpConfig,
    /// How long a graceful shutdown may take before the process exits anyway.
    #[serde(default = "default_shutdown_timeout", with = "humantime_serde")]
    pub shutdown_timeout: std::time::Duration,
}

/// Where the HTTP endpoint listens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Socket address, e.g. `127.0.0.1:9464`; empty disables the endpoint.
    pub bind: String,
}

fn default_shutdown_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(25)
}

impl ServiceConfig {
    /// Loads the service file at `path`, or the embedded defaults when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let embedded = Path::new("<embedded config/default.yaml>");
        let config: Self = match path {
            Some(path) => read_yaml_file(path),
            None => parse_yaml(embedded, EMBEDDED_DEFAULT_SERVICE_CONFIG),
        }?;
        // `pulsar.auth`: which keys apply depends on its type, beyond what serde checks.
        let issues = config.pulsar.check(path.unwrap_or(embedded));
        if issues.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError { issues })
        }
    }
}
