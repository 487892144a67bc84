//! The service file: where the shared services are and how the process serves HTTP.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{parse_yaml, read_yaml_file, ConfigError, ConfigIssue};
use crate::audit::AuditConfig;
use crate::delta::ObjectStoreServiceConfig;
use crate::pulsar::PulsarServiceConfig;
use crate::redis::{RedisMode, RedisServiceConfig};
use crate::serving::ServingConfig;

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
    /// The object store of the offline tables: the default table root and its options
    /// (`object_store:`; `offline:`, its earlier name, is still read).
    #[serde(alias = "offline")]
    pub object_store: ObjectStoreServiceConfig,
    /// The HTTP endpoint (health and metrics).
    pub http: HttpConfig,
    /// The feature-read listener (`/get-online-features`, `/v1/features`); its defaults when
    /// the section is left out.
    #[serde(default)]
    pub serving: ServingConfig,
    /// The training–serving audit `run` makes while it runs; off when the section is left
    /// out.
    #[serde(default)]
    pub audit: AuditConfig,
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
        let file = Self::file(path);
        let service: Self = match path {
            Some(path) => read_yaml_file(path)?,
            None => parse_yaml(&file, EMBEDDED_DEFAULT_SERVICE_CONFIG)?,
        };
        // `pulsar.auth`: which keys apply depends on its type, beyond what serde checks.
        let mut issues = service.pulsar.check(&file);
        issues.extend(service.serving_issues(&file));
        for (key, message) in service.audit.problems() {
            issues.push(ConfigIssue::at_key(&file, &format!("audit.{key}"), message));
        }
        if issues.is_empty() {
            Ok(service)
        } else {
            Err(ConfigError { issues })
        }
    }

    /// How problems name the service file: its path, or the embedded copy.
    pub fn file(path: Option<&Path>) -> PathBuf {
        path.map_or_else(
            || PathBuf::from("<embedded config/default.yaml>"),
            Path::to_path_buf,
        )
    }

    /// The serving section's own checks, and those against the other sections: the read
    /// cache needs a single Redis server, and the two listeners their own ports.
    fn serving_issues(&self, file: &Path) -> Vec<ConfigIssue> {
        let serving = &self.serving;
        let mut issues = serving.issues(file);
        if serving.cache_entities > 0 && self.redis.mode == RedisMode::Cluster {
            issues.push(ConfigIssue::at_key(
                file,
                "serving.cache_entities",
                "needs redis.mode standalone: Redis tells a connection which keys it read \
                 changed, and a cluster's reads go through one connection per node",
            ));
        }
        if !serving.bind.is_empty() && serving.bind == self.http.bind {
            issues.push(ConfigIssue::at_key(
                file,
                "serving.bind",
                format!(
                    "{} is also http.bind; feature reads need their own listener (e.g. 127.0.0.1:6566)",
                    serving.bind
                ),
            ));
        }
        issues
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_store_section_is_also_read_under_its_earlier_name() {
        let file = Path::new("service.yaml");
        let current =
            EMBEDDED_DEFAULT_SERVICE_CONFIG.replace("${OFFLINE_URL:-", "${FC_UNSET_URL:-");
        let earlier = current.replacen("\nobject_store:\n", "\noffline:\n", 1);
        assert_ne!(
            current, earlier,
            "the embedded file has an object_store section"
        );
        for text in [current, earlier] {
            let service: ServiceConfig = parse_yaml(file, &text).unwrap();
            assert_eq!(service.object_store.default_url, "file://data/offline");
        }
        let both = EMBEDDED_DEFAULT_SERVICE_CONFIG.replacen(
            "\nobject_store:\n",
            "\noffline:\n  default_url: file://a\nobject_store:\n",
            1,
        );
        let refused = parse_yaml::<ServiceConfig>(file, &both).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("duplicate field `object_store`"),
            "{refused}"
        );
    }
}
