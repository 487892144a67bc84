//! Writer schemas from Pulsar's schema registry (admin REST API), fetched once per version.

use std::collections::HashMap;

use serde::Deserialize;

use super::admin::{parse as parse_admin_answer, AdminError, PulsarAdmin};
use super::topic::TopicName;

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
    admin: PulsarAdmin,
    cache: HashMap<(String, i64), WriterSchema>,
}

impl SchemaRegistry {
    /// A registry client over the broker's admin API.
    pub fn new(admin: PulsarAdmin) -> Self {
        Self {
            admin,
            cache: HashMap::new(),
        }
    }

    /// Every registered version of `topic`'s schema, oldest first (empty when none).
    pub async fn all_versions(&mut self, topic: &str) -> Result<Vec<WriterSchema>, AdminError> {
        let path = schema_path(topic)?;
        let request = format!("schemas/{path}/schemas");
        let body = match self.admin.get(&request).await {
            Ok(body) => body,
            Err(e) if e.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let parsed: AllVersionsResponse = parse_admin_answer(&request, &body)?;
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
    pub async fn push(&self, topic: &str, kind: &str, definition: &str) -> Result<i64, AdminError> {
        let path = schema_path(topic)?;
        let body = serde_json::json!({"type": kind, "schema": definition, "properties": {}});
        let answer = self
            .admin
            .post_json(&format!("schemas/{path}/schema"), &body)
            .await?;
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
    ) -> Result<WriterSchema, AdminError> {
        let path = schema_path(topic)?;
        if let Some(found) = self.cache.get(&(path.clone(), version)) {
            return Ok(found.clone());
        }
        let parsed: SchemaResponse = self
            .admin
            .get_json(&format!("schemas/{path}/schema/{version}"))
            .await?;
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
fn schema_path(topic: &str) -> Result<String, AdminError> {
    Ok(TopicName::parse(topic)?.topic_path())
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
