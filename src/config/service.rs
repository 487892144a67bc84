//! The service file: where the shared services are and how the process serves HTTP.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{parse_yaml, read_yaml_file, ConfigError, ConfigIssue};
use crate::sink::delta::ObjectStoreServiceConfig;
use crate::sink::redis::{RedisMode, RedisServiceConfig};
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
    /// The feature-read listener (`/get-online-features`, `/v1/features`); its defaults when
    /// the section is left out.
    #[serde(default)]
    pub serving: ServingConfig,
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

/// The listener that serves online feature reads: Feast's feature-server API and
/// `/v1/features`, apart from the probes so that exposing one does not expose the other.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingConfig {
    /// Socket address, e.g. `127.0.0.1:6566` (Feast's feature-server port); empty turns
    /// feature reads off.
    #[serde(default = "default_serving_bind")]
    pub bind: String,
    /// The bearer token clients must present (usually `${FC_SERVING_TOKEN}`); required when
    /// `bind` is not a loopback address.
    #[serde(default)]
    pub token: Option<String>,
    /// A file holding the token (a mounted Secret), used when `token` is empty.
    #[serde(default)]
    pub token_file: Option<String>,
    /// Most entity rows one request may name; more is refused with 413.
    #[serde(default = "default_max_entities")]
    pub max_entities_per_request: usize,
    /// Largest request body in bytes; more is refused with 413.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Time a client has to send a request's headers and body; a slower one gets 408 (or,
    /// for headers, a closed connection).
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Requests served at once; one more is refused with 429 and `Retry-After` (bounds the
    /// memory that requests in flight hold).
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent_requests: usize,
    /// Threads of the reads' own runtime, apart from the pipelines' workers: one keeps a
    /// read from queueing behind ingest and costs the least CPU per request; more serve
    /// large requests faster on a box with cores to spare.
    #[serde(default = "default_serving_threads")]
    pub threads: usize,
    /// Entities (Redis keys) whose rows the reads keep in memory, each dropped when Redis
    /// says its key changed (RESP3 client tracking); 0 reads Redis every time. One Redis
    /// server only.
    #[serde(default)]
    pub cache_entities: usize,
    /// Feast feature services by name: each a list of `view:feature` references or whole
    /// views (`view`), as `feature_service` in `/get-online-features` names them.
    #[serde(default)]
    pub feature_services: BTreeMap<String, Vec<String>>,
}

impl Default for ServingConfig {
    fn default() -> Self {
        Self {
            bind: default_serving_bind(),
            token: None,
            token_file: None,
            max_entities_per_request: default_max_entities(),
            max_body_bytes: default_max_body_bytes(),
            request_timeout: default_request_timeout(),
            max_concurrent_requests: default_max_concurrent(),
            threads: default_serving_threads(),
            cache_entities: 0,
            feature_services: BTreeMap::new(),
        }
    }
}

/// Never prints the token.
impl std::fmt::Debug for ServingConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingConfig")
            .field("bind", &self.bind)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("max_entities_per_request", &self.max_entities_per_request)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("request_timeout", &self.request_timeout)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("threads", &self.threads)
            .field("cache_entities", &self.cache_entities)
            .field("feature_services", &self.feature_services)
            .finish()
    }
}

impl ServingConfig {
    /// The bearer token clients must send: `token`, else the contents of `token_file`.
    pub fn token(&self) -> Result<Option<String>, crate::secret::SecretFileError> {
        crate::secret::read(&self.token, &self.token_file)
    }

    /// Whether a token is configured at all (without reading the file), for `validate`.
    pub fn has_token_configured(&self) -> bool {
        crate::secret::non_empty(&self.token).is_some()
            || crate::secret::non_empty(&self.token_file).is_some()
    }

    /// Whether `bind` only accepts connections from this host (a loopback address or
    /// `localhost`); anything else, including `0.0.0.0` and host names, is reachable from
    /// the network and needs the token.
    pub fn is_loopback(&self) -> bool {
        is_loopback_bind(&self.bind)
    }
}

/// Whether a `host:port` bind address is a loopback one.
pub fn is_loopback_bind(bind: &str) -> bool {
    if let Ok(address) = bind.parse::<SocketAddr>() {
        return address.ip().is_loopback();
    }
    match bind.rsplit_once(':') {
        Some((host, _)) => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.eq_ignore_ascii_case("localhost")
                || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        None => false,
    }
}

fn default_serving_bind() -> String {
    "127.0.0.1:6566".into()
}
fn default_max_entities() -> usize {
    1000
}
fn default_max_body_bytes() -> usize {
    256 * 1024
}
fn default_request_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_max_concurrent() -> usize {
    64
}

fn default_serving_threads() -> usize {
    1
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

    /// Limits that would refuse every request, and one port for both listeners.
    fn serving_issues(&self, file: &Path) -> Vec<ConfigIssue> {
        let serving = &self.serving;
        let issue = |key: &str, message: String| ConfigIssue {
            file: file.to_path_buf(),
            line: None,
            key: Some(format!("serving.{key}")),
            message,
        };
        let mut issues = Vec::new();
        for (key, value) in [
            ("max_entities_per_request", serving.max_entities_per_request),
            ("max_body_bytes", serving.max_body_bytes),
            ("max_concurrent_requests", serving.max_concurrent_requests),
            ("threads", serving.threads),
        ] {
            if value == 0 {
                issues.push(issue(key, "must be at least 1".into()));
            }
        }
        if serving.cache_entities > 0 && self.redis.mode == RedisMode::Cluster {
            issues.push(issue(
                "cache_entities",
                "needs redis.mode standalone: Redis tells a connection which keys it read \
                 changed, and a cluster's reads go through one connection per node"
                    .into(),
            ));
        }
        if serving.request_timeout.is_zero() {
            issues.push(issue("request_timeout", "must be positive".into()));
        }
        if !serving.bind.is_empty() && serving.bind == self.http.bind {
            issues.push(issue(
                "bind",
                format!(
                    "{} is also http.bind; feature reads need their own listener (e.g. 127.0.0.1:6566)",
                    serving.bind
                ),
            ));
        }
        issues
    }
}
