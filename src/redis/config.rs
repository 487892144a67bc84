//! Settings of the Redis online sink.

use std::time::Duration;

use serde::Deserialize;

/// How `redis.url` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    /// One server (or a proxy in front of many).
    #[default]
    Standalone,
    /// Redis Cluster; `url` is a comma-separated list of seed nodes.
    Cluster,
}

/// Where Redis is (service file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisServiceConfig {
    /// `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// Longest wait for one pipelined batch to be answered.
    #[serde(default = "default_response_timeout", with = "humantime_serde")]
    pub response_timeout: Duration,
    /// `standalone` (default) or `cluster` (then `url` lists seed nodes, comma-separated).
    #[serde(default)]
    pub mode: RedisMode,
    /// PEM file of the CA that signed the server certificate, for `rediss://` URLs whose
    /// server is not signed by a public CA.
    #[serde(default)]
    pub tls_ca_file: Option<String>,
}

fn default_response_timeout() -> Duration {
    Duration::from_secs(10)
}

/// The online sink of a pipeline (pipeline file, `online:`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSinkConfig {
    /// `false` turns the online sink off.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// First part of every key: `{key_prefix}:{pipeline}:{entity}`.
    #[serde(default = "default_prefix")]
    pub key_prefix: String,
    /// Expiry of an entity's hash, refreshed on each write; absent means no expiry.
    #[serde(default, with = "humantime_serde")]
    pub ttl: Option<Duration>,
    /// Key and value layout: `native` (readable) or `feast` (Feast's online store bytes).
    #[serde(default)]
    pub layout: LayoutKind,
    /// Feast project name (required with `layout: feast`); the view is the pipeline name.
    #[serde(default)]
    pub feast_project: Option<String>,
    /// Batches written concurrently (each one pipelined round trip); acknowledged in order.
    #[serde(default = "default_in_flight")]
    pub max_in_flight_batches: usize,
}

fn default_in_flight() -> usize {
    4
}

/// The Redis layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LayoutKind {
    /// `{prefix}:{view}:{key}` hashes with readable values.
    #[default]
    Native,
    /// Byte-compatible with Feast's Redis online store.
    Feast,
}

fn default_true() -> bool {
    true
}
fn default_prefix() -> String {
    "fc".into()
}
