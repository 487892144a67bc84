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
    /// Absent in the single-version answer, which is asked for by version.
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

    /// Sends `request` and returns the body of a successful answer.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<String, RegistryError> {
        let http_error = |source| RegistryError::Http {
            url: url.to_string(),
            source,
        };
        let response = request.send().await.map_err(http_error)?;
        let status = response.status();
        let body = response.text().await.map_err(http_error)?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(RegistryError::Status {
                url: url.to_string(),
                status: status.as_u16(),
                body: body.chars().take(500).collect(),
            })
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(url: &str, body: &str) -> Result<T, RegistryError> {
        serde_json::from_str(body).map_err(|e| RegistryError::Status {
            url: url.to_string(),
            status: 200,
            body: format!(
                "unexpected answer ({e}): {}",
                body.chars().take(300).collect::<String>()
            ),
        })
    }

    /// Every registered version of `topic`'s schema, oldest first (empty when none).
    pub async fn all_versions(&mut self, topic: &str) -> Result<Vec<WriterSchema>, RegistryError> {
        let path = schema_path(topic)?;
        let url = format!("{}/admin/v2/schemas/{path}/schemas", self.admin_url);
        let body = match self.send(self.http.get(&url), &url).await {
            Ok(body) => body,
            Err(RegistryError::Status { status: 404, .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let parsed: AllVersionsResponse = Self::parse(&url, &body)?;
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
        let answer = self.send(self.http.post(&url).json(&body), &url).await?;
        let version = serde_json::from_str::<serde_json::Value>(&answer)
            .ok()
            .and_then(|v| {
                v["version"]
                    .as_i64()
                    .or_else(|| v["version"]["version"].as_i64())
            })
            .unwrap_or(-1);
        Ok(version)
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
        let body = self.send(self.http.get(&url), &url).await?;
        let parsed: SchemaResponse = Self::parse(&url, &body)?;
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
}
