//! The serving section of the service file (`serving:`) and its checks: limits that would
//! refuse every request; feature services must name views and features; a listener
//! reachable from the network must have its token (`run` refuses to start without one,
//! `validate` warns, since the token is usually only in the deployed environment).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::FeatureView;
use crate::yaml::ConfigIssue;

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
    /// Logging of served reads to Delta tables (off when left out).
    #[serde(default)]
    pub feature_logging: Option<FeatureLoggingConfig>,
}

/// `serving.feature_logging`: every `/get-online-features` answer's rows of the views named,
/// for a share of their entities, in a Delta table per view at `<url>/<view>`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureLoggingConfig {
    /// The tables' root: an object store URL as a pipeline's `offline.url` takes it, with the
    /// service file's `object_store.options`.
    #[serde(default)]
    pub url: Option<String>,
    /// Per view, the share of its entities logged (0 < rate ≤ 1), chosen by a hash of their
    /// join key values: the same entities on every request.
    #[serde(default)]
    pub views: BTreeMap<String, f64>,
    /// A view's rows are committed at least this often while some wait.
    #[serde(default = "default_log_interval", with = "humantime_serde")]
    pub rollover_interval: Duration,
    /// Or once this many of a view's rows wait.
    #[serde(default = "default_log_rollover_rows")]
    pub rollover_rows: usize,
    /// Rows held in memory at most, from the answer until their commit; rows offered beyond
    /// this are dropped (and counted).
    #[serde(default = "default_log_queue_rows")]
    pub queue_rows: usize,
}

impl FeatureLoggingConfig {
    /// The section's own checks: a URL of a known store, rates in (0, 1], bounds that
    /// can take rows.
    pub fn issues(&self, file: &Path) -> Vec<ConfigIssue> {
        let key = |k: &str| format!("serving.feature_logging.{k}");
        let mut issues = Vec::new();
        match self.url.as_deref().filter(|u| !u.is_empty()) {
            None => issues.push(ConfigIssue::at_key(
                file,
                &key("url"),
                "is required: where the logged tables go (e.g. file://served or s3://bucket/served)",
            )),
            Some(url) => {
                if let Err(why) = crate::delta::check_store_url(url) {
                    issues.push(ConfigIssue::at_key(file, &key("url"), why));
                }
            }
        }
        if self.views.is_empty() {
            issues.push(ConfigIssue::at_key(
                file,
                &key("views"),
                "names no view: give each view logged its share of entities (e.g. `driver_stats: 1.0`)",
            ));
        }
        for (view, rate) in &self.views {
            if !(*rate > 0.0 && *rate <= 1.0) {
                issues.push(ConfigIssue::at_key(
                    file,
                    &key(&format!("views.{view}")),
                    format!("{rate} is not a share of entities: give 0 < rate <= 1"),
                ));
            }
        }
        if self.rollover_interval.is_zero() {
            issues.push(ConfigIssue::at_key(
                file,
                &key("rollover_interval"),
                "must be positive",
            ));
        }
        if self.rollover_rows == 0 {
            issues.push(ConfigIssue::at_key(
                file,
                &key("rollover_rows"),
                "must be at least 1",
            ));
        }
        if self.queue_rows < self.rollover_rows {
            issues.push(ConfigIssue::at_key(
                file,
                &key("queue_rows"),
                format!(
                    "{} is below rollover_rows ({}): rows held until their commit would never reach a rollover",
                    self.queue_rows, self.rollover_rows
                ),
            ));
        }
        issues
    }
}

fn default_log_interval() -> Duration {
    Duration::from_secs(30)
}
fn default_log_rollover_rows() -> usize {
    100_000
}
/// Twice a rollover: rows keep coming while one is being committed.
fn default_log_queue_rows() -> usize {
    200_000
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
            feature_logging: None,
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
            .field("feature_logging", &self.feature_logging)
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

    /// Limits that would refuse every request.
    pub fn issues(&self, file: &Path) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        for (key, value) in [
            ("max_entities_per_request", self.max_entities_per_request),
            ("max_body_bytes", self.max_body_bytes),
            ("max_concurrent_requests", self.max_concurrent_requests),
            ("threads", self.threads),
        ] {
            if value == 0 {
                issues.push(ConfigIssue::at_key(
                    file,
                    &format!("serving.{key}"),
                    "must be at least 1",
                ));
            }
        }
        if self.request_timeout.is_zero() {
            issues.push(ConfigIssue::at_key(
                file,
                "serving.request_timeout",
                "must be positive",
            ));
        }
        if let Some(logging) = &self.feature_logging {
            issues.extend(logging.issues(file));
        }
        issues
    }
}

/// Feature logging names views that are not online views.
pub fn feature_logging_issues(
    file: &Path,
    serving: &ServingConfig,
    views: &[FeatureView],
) -> Vec<ConfigIssue> {
    let Some(logging) = &serving.feature_logging else {
        return Vec::new();
    };
    logging
        .views
        .keys()
        .filter(|name| !views.iter().any(|v| &v.name == *name))
        .map(|name| {
            let known: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
            ConfigIssue::at_key(
                file,
                &format!("serving.feature_logging.views.{name}"),
                format!(
                    "no online view `{name}` (online views: {})",
                    known.join(", ")
                ),
            )
        })
        .collect()
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

/// Feature service entries that name no online view, or a feature the view lacks.
pub fn feature_service_issues(
    file: &Path,
    serving: &ServingConfig,
    views: &[FeatureView],
) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    for (service, entries) in &serving.feature_services {
        let key = format!("serving.feature_services.{service}");
        if entries.is_empty() {
            issues.push(ConfigIssue::at_key(file, &key, "names no features"));
        }
        for entry in entries {
            let (view_name, feature) = match entry.split_once(':') {
                Some((view, feature)) => (view, Some(feature)),
                None => (entry.as_str(), None),
            };
            let Some(view) = views.iter().find(|v| v.name == view_name) else {
                let known: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
                issues.push(ConfigIssue::at_key(
                    file,
                    &key,
                    format!(
                        "`{entry}`: no online view `{view_name}` (online views: {})",
                        known.join(", ")
                    ),
                ));
                continue;
            };
            if let Some(feature) = feature {
                if view.feature_index(feature).is_err() {
                    issues.push(ConfigIssue::at_key(
                        file,
                        &key,
                        format!("`{entry}`: view `{view_name}` has no feature `{feature}`"),
                    ));
                }
            }
        }
    }
    issues
}

/// The token every read must carry, read now; an error when it cannot be read, or when the
/// serving bind is reachable from the network and no token is configured.
pub fn serving_token(file: &Path, serving: &ServingConfig) -> Result<Option<String>, ConfigIssue> {
    let token = serving
        .token()
        .map_err(|e| ConfigIssue::at_key(file, "serving.token_file", e.to_string()))?;
    if token.is_none() && !serving.bind.is_empty() && !serving.is_loopback() {
        return Err(ConfigIssue::at_key(
            file,
            "serving.token",
            unguarded(serving),
        ));
    }
    Ok(token)
}

/// For `validate`: the serving bind is reachable from the network and no token is set.
pub fn unguarded_warning(file: &Path, serving: &ServingConfig) -> Option<ConfigIssue> {
    (!serving.bind.is_empty() && !serving.is_loopback() && !serving.has_token_configured())
        .then(|| ConfigIssue::at_key(file, "serving.bind", unguarded(serving)))
}

fn unguarded(serving: &ServingConfig) -> String {
    format!(
        "serving.bind {} is not a loopback address, so every feature value would be readable from the network without a token: set serving.token (FC_SERVING_TOKEN) or serving.token_file (FC_SERVING_TOKEN_FILE), or bind 127.0.0.1; `run` refuses to start until then",
        serving.bind
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving(yaml: &str) -> ServingConfig {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn a_network_bind_needs_a_token() {
        let file = Path::new("service.yaml");
        let open = serving("bind: 0.0.0.0:6566\n");
        let refused = serving_token(file, &open).unwrap_err();
        assert_eq!(refused.key.as_deref(), Some("serving.token"));
        assert!(refused.message.contains("0.0.0.0:6566"), "{refused}");
        assert!(unguarded_warning(file, &open).is_some());

        let guarded = serving("bind: 0.0.0.0:6566\ntoken: t0ken\n");
        assert_eq!(
            serving_token(file, &guarded).unwrap().as_deref(),
            Some("t0ken")
        );
        assert!(unguarded_warning(file, &guarded).is_none());

        for loopback in ["127.0.0.1:6566", "[::1]:6566", "localhost:6566", ""] {
            let local = serving(&format!("bind: \"{loopback}\"\n"));
            assert_eq!(serving_token(file, &local).unwrap(), None, "{loopback}");
            assert!(unguarded_warning(file, &local).is_none(), "{loopback}");
        }
        let host = serving("bind: feature-host:6566\n");
        assert!(serving_token(file, &host).is_err());

        let unreadable = serving("bind: 127.0.0.1:1\ntoken_file: /nonexistent/serving-token\n");
        let err = serving_token(file, &unreadable).unwrap_err();
        assert_eq!(err.key.as_deref(), Some("serving.token_file"));
    }

    #[test]
    fn feature_logging_needs_a_url_known_views_and_shares() {
        let file = Path::new("service.yaml");
        assert!(serving(
            "bind: 127.0.0.1:1
"
        )
        .feature_logging
        .is_none());
        let good = serving(
            "feature_logging:\n  url: file://served\n  views:\n    user_features: 0.5\n  rollover_interval: 2s\n",
        );
        assert!(good.issues(file).is_empty());
        let logging = good.feature_logging.as_ref().unwrap();
        assert_eq!(logging.rollover_interval, Duration::from_secs(2));
        assert_eq!(
            (logging.rollover_rows, logging.queue_rows),
            (100_000, 200_000)
        );

        let bad = serving(
            "feature_logging:\n  views:\n    a: 0\n    b: 1.5\n    c: 1.0\n  rollover_rows: 10\n  queue_rows: 5\n",
        );
        let keys: Vec<String> = bad
            .issues(file)
            .into_iter()
            .filter_map(|issue| issue.key)
            .collect();
        assert_eq!(
            keys,
            [
                "serving.feature_logging.url",
                "serving.feature_logging.views.a",
                "serving.feature_logging.views.b",
                "serving.feature_logging.queue_rows",
            ]
        );
        let wrong_scheme = serving("feature_logging:\n  url: ftp://x\n  views: {a: 1}\n");
        assert_eq!(wrong_scheme.issues(file).len(), 1);
        let unknown = feature_logging_issues(file, &bad, &[]);
        assert_eq!(unknown.len(), 3);
        assert!(
            unknown[0].message.contains("no online view `a`"),
            "{}",
            unknown[0]
        );
    }
}
