//! Writer schemas from Pulsar's schema registry (admin REST API), fetched once per version.

use std::collections::HashMap;

use serde::Deserialize;

/// Failures talking to the schema registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The HTTP request failed (network, timeout).
    #[error("schema registry request {url} failed: {source}")]
    Http {
        /// The URL requested.
        url: String,
        /// Why.
        source: reqwest::Error,
    },
    /// The registry answered with an error status.
    #[error("schema registry {url} answered {status}: {body}")]
    Status {
        /// The URL requested.
        url: String,
        /// HTTP status.
        status: u16,
        /// Response body (truncated).
        body: String,
    },
    /// The topic name is not `persistent://tenant/namespace/topic`.
    #[error("topic `{0}` is not of the form persistent://tenant/namespace/topic")]
    BadTopic(String),
}

impl RegistryError {
    /// Whether a retry may help (network trouble or a 5xx), as opposed to a missing schema.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Http { .. } => true,
            RegistryError::Status { status, .. } => *status >= 500,
            RegistryError::BadTopic(_) => false,
        }
    }
}

/// One registered writer schema version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterSchema {
    /// Registry version number.
    pub version: i64,
    /// Schema type as the registry names it (`AVRO`, `JSON`, ...).
    pub kind: String,
    /// The schema definition (Avro JSON for AVRO and JSON schemas).
    pub definition: String,
}

#[derive(Deserialize)]
struct AllVersionsResponse {
    #[serde(rename = "getSchemaResponses", default)]
    versions: Vec<SchemaResponse>,
}

#[derive(Deserialize)]
struct SchemaResponse {
    #[serde(default)]
    version: i64,
    #[serde(rename = "type")]
    kind: String,
    data: String,
}

/// Client for `GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schema/{version}` with a cache.
#[derive(Debug, Clone)]
pub struct SchemaRegistry {
    http: reqwest::Client,
    admin_url: String,
    cache: HashMap<(String, i64), WriterSchema>,
}

impl SchemaRegistry {
    /// A client for the broker's admin API at `admin_url` (e.g. `http://127.0.0.1:8080`).
    pub fn new(http: reqwest::Client, admin_url: &str) -> Self {
        Self {
            http,
            admin_url: admin_url.trim_end_matches('/').to_string(),
            cache: HashMap::new(),
        }
    }

    /// Every registered version of `topic`'s schema, oldest first (empty when none).
    pub async fn all_versions(&mut self, topic: &str) -> Result<Vec<WriterSchema>, RegistryError> {
        let path = schema_path(topic)?;
        let url = format!("{}/admin/v2/schemas/{path}/schemas", self.admin_url);
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|source| RegistryError::Http {
                url: url.clone(),
                source,
            })?;
        let status = response.status();
        if status.as_u16() == 404 {
            return Ok(Vec::new());
        }
        if !status.is_success() {
            let body: String = response
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            return Err(RegistryError::Status {
                url,
                status: status.as_u16(),
                body,
            });
        }
        let parsed: AllVersionsResponse =
            response
                .json()
                .await
                .map_err(|source| RegistryError::Http {
                    url: url.clone(),
                    source,
                })?;
        let mut versions: Vec<WriterSchema> = parsed
            .versions
            .into_iter()
            .map(|r| WriterSchema {
                version: r.version,
                kind: r.kind,
                definition: r.data,
            })
            .collect();
        versions.sort_by_key(|v| v.version);
        for version in &versions {
            self.cache
                .insert((path.clone(), version.version), version.clone());
        }
        Ok(versions)
    }

    /// Registers `definition` as a new version of `topic`'s schema; the broker refuses it
    /// (409) when its namespace's compatibility strategy does. Returns the version.
    pub async fn push(
        &self,
        topic: &str,
        kind: &str,
        definition: &str,
    ) -> Result<i64, RegistryError> {
        let path = schema_path(topic)?;
        let url = format!("{}/admin/v2/schemas/{path}/schema", self.admin_url);
        let body = serde_json::json!({"type": kind, "schema": definition, "properties": {}});
        let response = self
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|source| RegistryError::Http {
                url: url.clone(),
                source,
            })?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(RegistryError::Status {
                url,
                status: status.as_u16(),
                body: text.chars().take(500).collect(),
            });
        }
        let version = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| {
                v["version"]
                    .as_i64()
                    .or_else(|| v["version"]["version"].as_i64())
            })
            .unwrap_or(-1);
        Ok(version)
    }

    /// The definition of a version fetched before, without asking the registry.
    pub fn cached_definition(&self, topic: &str, version: i64) -> Option<String> {
        let path = schema_path(topic).ok()?;
        self.cache
            .get(&(path, version))
            .map(|s| s.definition.clone())
    }

    /// The writer schema `version` of `topic` (a partition's name is mapped to its topic).
    pub async fn writer_schema(
        &mut self,
        topic: &str,
        version: i64,
    ) -> Result<WriterSchema, RegistryError> {
        let path = schema_path(topic)?;
        if let Some(found) = self.cache.get(&(path.clone(), version)) {
            return Ok(found.clone());
        }
        let url = format!(
            "{}/admin/v2/schemas/{path}/schema/{version}",
            self.admin_url
        );
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|source| RegistryError::Http {
                url: url.clone(),
                source,
            })?;
        let status = response.status();
        if !status.is_success() {
            let body: String = response
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            return Err(RegistryError::Status {
                url,
                status: status.as_u16(),
                body,
            });
        }
        let parsed: SchemaResponse =
            response
                .json()
                .await
                .map_err(|source| RegistryError::Http {
                    url: url.clone(),
                    source,
                })?;
        let schema = WriterSchema {
            version: if parsed.version == 0 {
                version
            } else {
                parsed.version
            },
            kind: parsed.kind,
            definition: parsed.data,
        };
        self.cache.insert((path, version), schema.clone());
        Ok(schema)
    }
}

/// Pulsar puts the schema version in message metadata as an 8-byte big-endian number.
pub fn decode_schema_version(bytes: &[u8]) -> Option<i64> {
    let array: [u8; 8] = bytes.try_into().ok()?;
    Some(i64::from_be_bytes(array))
}

/// `persistent://t/ns/topic-partition-3` → `t/ns/topic`.
fn schema_path(topic: &str) -> Result<String, RegistryError> {
    let rest = topic
        .strip_prefix("persistent://")
        .or_else(|| topic.strip_prefix("non-persistent://"))
        .ok_or_else(|| RegistryError::BadTopic(topic.to_string()))?;
    let parts: Vec<&str> = rest.split('/').collect();
    let [tenant, namespace, name] = parts.as_slice() else {
        return Err(RegistryError::BadTopic(topic.to_string()));
    };
    let base = match name.rsplit_once("-partition-") {
        Some((base, index)) if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) => {
            base
        }
        _ => name,
    };
    Ok(format!("{tenant}/{namespace}/{base}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_map_to_their_topic() {
        assert_eq!(
            schema_path("persistent://public/default/f-partition-2").unwrap(),
            "public/default/f"
        );
        assert_eq!(
            schema_path("persistent://public/default/f").unwrap(),
            "public/default/f"
        );
        assert!(schema_path("public/default/f").is_err());
    }

    #[test]
    fn schema_version_is_big_endian() {
        assert_eq!(decode_schema_version(&[0, 0, 0, 0, 0, 0, 1, 2]), Some(258));
        assert_eq!(decode_schema_version(&[1]), None);
    }
}
