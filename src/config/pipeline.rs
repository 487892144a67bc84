//! Pipeline files (`connectors/*.yaml`): one Pulsar topic into the online and offline sinks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ServiceConfig;
use super::{issue_at, read_yaml_file, resolve_path, ConfigError, ConfigIssue, Spanned};
use crate::record::RowLayout;
use crate::schema::{Compatibility, DecoderSpec, PayloadFormat, ReaderSchema};
use crate::sink::delta::{DeltaSinkBuilder, OfflineSinkConfig};
use crate::sink::redis::{
    feast_supports, LayoutKind, OnlineSinkConfig, OnlineView, RedisSinkBuilder,
};
use crate::sink::SinkBuilder;
use crate::source::pulsar::PulsarSourceConfig;

/// A pipeline file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// Unique pipeline name; also the feature view name in Redis keys and the offline table name.
    pub name: Spanned<String>,
    /// Where the events come from.
    pub source: PulsarSourceConfig,
    /// The reader schema the pipeline expects.
    pub schema: SchemaRef,
    /// Which fields identify the entity and its event time.
    pub entity: EntityConfig,
    /// Which fields are features: `all` (every field that is not a key or the event time)
    /// or a list of names.
    #[serde(default)]
    pub features: Option<Spanned<FeatureSelection>>,
    /// The Redis online sink; absent or `enabled: false` turns it off.
    #[serde(default)]
    pub online: Option<OnlineSinkConfig>,
    /// The offline sink (a Delta table); absent or `enabled: false` turns it off.
    #[serde(default)]
    pub offline: Option<OfflineSinkConfig>,
}

/// The schema a pipeline expects, and how it treats other writer versions.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaRef {
    /// Path of the Avro record schema (`.avsc`), relative to the project root. For JSON
    /// payloads it describes the JSON objects, as Pulsar's JSON schema does.
    pub file: Spanned<String>,
    /// Payload format: `avro` (Pulsar AVRO schema) or `json` (Pulsar JSON schema).
    #[serde(default)]
    pub format: PayloadFormat,
    /// Strategy between this schema and each writer version (Pulsar's names).
    #[serde(default)]
    pub compatibility: Compatibility,
    /// `true`: an event with NaN or ±Infinity in a float/double feature goes to the
    /// dead-letter topic (`non_finite_value`) instead of into the stores.
    #[serde(default)]
    pub reject_non_finite: bool,
}

/// Entity identity and event time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntityConfig {
    /// Field(s) whose values identify the entity (join keys).
    pub keys: Spanned<Vec<String>>,
    /// Field holding the event time (`long` millis or a timestamp logical type).
    pub event_time: Spanned<String>,
}

/// `features: all` or `features: [a, b]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FeatureSelection {
    /// The word `all`.
    Word(String),
    /// Explicit feature field names.
    List(Vec<String>),
}

/// A pipeline after every check passed: names resolved against the schema.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Unique pipeline name.
    pub name: String,
    /// The file it came from.
    pub file: PathBuf,
    /// Source settings.
    pub source: PulsarSourceConfig,
    /// The parsed reader schema.
    pub schema: ReaderSchema,
    /// Payload format.
    pub format: PayloadFormat,
    /// Compatibility strategy.
    pub compatibility: Compatibility,
    /// Whether NaN/±Infinity features are dead-lettered.
    pub reject_non_finite: bool,
    /// Entity key fields, in order.
    pub entity_keys: Vec<String>,
    /// Event-time field.
    pub event_time: String,
    /// Feature fields, in schema order.
    pub features: Vec<String>,
    /// Online sink, when enabled.
    pub online: Option<OnlineSinkConfig>,
    /// Offline sink, when enabled.
    pub offline: Option<OfflineSinkConfig>,
}

impl PipelineConfig {
    /// Where keys, event time and features are in this pipeline's rows.
    pub fn row_layout(&self) -> RowLayout {
        RowLayout {
            keys: self.entity_keys.clone(),
            event_time: self.event_time.clone(),
            features: self.features.clone(),
        }
    }

    /// The pipeline's sinks, each as the builder the runtime turns into a lane. The one place
    /// that lists the sink kinds.
    pub fn sink_builders(&self, service: &ServiceConfig) -> Vec<Box<dyn SinkBuilder>> {
        let mut builders: Vec<Box<dyn SinkBuilder>> = Vec::new();
        if let Some(online) = &self.online {
            builders.push(Box::new(RedisSinkBuilder {
                service: service.redis.clone(),
                config: online.clone(),
            }));
        }
        if let Some(offline) = &self.offline {
            builders.push(Box::new(DeltaSinkBuilder {
                service: service.offline.clone(),
                config: offline.clone(),
                gap_grace: None,
            }));
        }
        builders
    }

    /// How readers see this pipeline's online features; `None` without an online sink.
    pub fn online_view(&self) -> Option<OnlineView> {
        let online = self.online.as_ref()?;
        let types = crate::schema::arrow_schema_of_reader(&self.schema).unwrap_or_default();
        Some(OnlineView::new(
            &self.name,
            online,
            &self.entity_keys,
            &self.features,
            &types,
        ))
    }

    /// What a payload decoder for this pipeline needs.
    pub fn decoder_spec(&self) -> DecoderSpec {
        DecoderSpec {
            topic: self.source.primary_topic().unwrap_or_default().to_string(),
            reader: self.schema.clone(),
            format: self.format,
            compatibility: self.compatibility,
            reject_non_finite: self.reject_non_finite,
            columns: self.row_layout().columns(),
            entity_keys: self.entity_keys.clone(),
            event_time: self.event_time.clone(),
            capacity: self.source.max_batch_messages,
        }
    }
}

/// Loads and checks every `*.yaml`/`*.yml` file in `connectors_dir`. Relative paths inside
/// are resolved against `root`. All problems of all files are reported together.
pub fn load_pipelines(
    connectors_dir: &Path,
    root: &Path,
) -> Result<Vec<PipelineConfig>, ConfigError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(connectors_dir)
        .map_err(|e| {
            ConfigError::single(ConfigIssue {
                file: connectors_dir.to_path_buf(),
                line: None,
                key: None,
                message: format!("cannot read the connectors folder: {e}"),
            })
        })?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ConfigError::single(ConfigIssue {
            file: connectors_dir.to_path_buf(),
            line: None,
            key: None,
            message: "no pipeline files (*.yaml) found".into(),
        }));
    }
    let mut issues = Vec::new();
    let mut pipelines = Vec::new();
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in files {
        let parsed: PipelineFile = match read_yaml_file(&file) {
            Ok(parsed) => parsed,
            Err(e) => {
                issues.extend(e.issues);
                continue;
            }
        };
        if let Some(first) = names.get(&parsed.name.value) {
            issues.push(issue_at(
                &file,
                &parsed.name,
                "name",
                format!(
                    "pipeline name `{}` is already used by {}",
                    parsed.name.value,
                    first.display()
                ),
            ));
            continue;
        }
        names.insert(parsed.name.value.clone(), file.clone());
        match check(&file, root, parsed) {
            Ok(pipeline) => pipelines.push(pipeline),
            Err(mut found) => issues.append(&mut found),
        }
    }
    issues.extend(overlapping_key_spaces(&pipelines));
    if issues.is_empty() {
        Ok(pipelines)
    } else {
        Err(ConfigError { issues })
    }
}

/// Whether `path` (resolving `..` and links) lies under `root`.
fn inside(root: &Path, path: &Path) -> bool {
    match (root.canonicalize(), path.canonicalize()) {
        (Ok(root), Ok(path)) => path.starts_with(root),
        _ => false,
    }
}

/// Native-layout pipelines whose keys `{prefix}:{pipeline}:{entity}` could be the same
/// Redis keys (one key space starting with the other, e.g. prefix `fc:a` + pipeline `b`
/// and prefix `fc` + pipeline `a` with an entity `b:…`): each would overwrite the other.
fn overlapping_key_spaces(pipelines: &[PipelineConfig]) -> Vec<ConfigIssue> {
    let spaces: Vec<(&PipelineConfig, String)> = pipelines
        .iter()
        .filter_map(|p| {
            let online = p.online.as_ref()?;
            (online.layout == LayoutKind::Native)
                .then(|| (p, format!("{}:{}:", online.key_prefix, p.name)))
        })
        .collect();
    let mut issues = Vec::new();
    for (i, (a, space_a)) in spaces.iter().enumerate() {
        for (b, space_b) in &spaces[i + 1..] {
            if space_a.starts_with(space_b.as_str()) || space_b.starts_with(space_a.as_str()) {
                issues.push(ConfigIssue {
                    file: b.file.clone(),
                    line: None,
                    key: Some("online.key_prefix".into()),
                    message: format!(
                        "pipeline `{}` writes Redis keys `{space_b}…`, which overlap `{space_a}…` of pipeline `{}` ({}); give one a distinct key_prefix",
                        b.name,
                        a.name,
                        a.file.display()
                    ),
                });
            }
        }
    }
    issues
}

fn check(
    file: &Path,
    root: &Path,
    parsed: PipelineFile,
) -> Result<PipelineConfig, Vec<ConfigIssue>> {
    let mut issues = Vec::new();
    let name = &parsed.name;
    let name_ok = !name.value.is_empty()
        && name
            .value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_ok {
        issues.push(issue_at(
            file,
            name,
            "name",
            "use letters, digits, `_` and `-` only",
        ));
    }
    issues.extend(parsed.source.check(file));

    let schema_path = resolve_path(root, &parsed.schema.file.value);
    let schema = match ReaderSchema::load(&schema_path) {
        Ok(_) if !inside(root, &schema_path) => {
            issues.push(issue_at(
                file,
                &parsed.schema.file,
                "schema.file",
                format!(
                    "{} is outside the project root {}; keep schemas in the project",
                    schema_path.display(),
                    root.display()
                ),
            ));
            None
        }
        Ok(schema) => Some(schema),
        Err(e) => {
            issues.push(issue_at(
                file,
                &parsed.schema.file,
                "schema.file",
                e.to_string(),
            ));
            None
        }
    };

    let keys = &parsed.entity.keys;
    if keys.value.is_empty() {
        issues.push(issue_at(
            file,
            keys,
            "entity.keys",
            "name at least one entity key field",
        ));
    }
    let event_time = &parsed.entity.event_time;
    let mut features = Vec::new();
    if let Some(schema) = &schema {
        for key in &keys.value {
            if let Err(e) = schema.check_key_field(key) {
                issues.push(issue_at(file, keys, "entity.keys", e.to_string()));
            }
        }
        if let Err(e) = schema.check_event_time_field(&event_time.value) {
            issues.push(issue_at(
                file,
                event_time,
                "entity.event_time",
                e.to_string(),
            ));
        }
        let not_feature = |f: &str| keys.value.iter().any(|k| k == f) || f == event_time.value;
        match &parsed.features {
            None => features = schema.field_names().filter(|f| !not_feature(f)).collect(),
            Some(sel) => {
                match &sel.value {
                    FeatureSelection::Word(w) if w == "all" => {
                        features = schema.field_names().filter(|f| !not_feature(f)).collect();
                    }
                    FeatureSelection::Word(w) => issues.push(issue_at(
                        file,
                        sel,
                        "features",
                        format!("expected `all` or a list of field names, found `{w}`"),
                    )),
                    FeatureSelection::List(list) => {
                        for feature in list {
                            if !schema.has_field(feature) {
                                issues.push(issue_at(
                                    file,
                                    sel,
                                    "features",
                                    format!(
                                        "field `{feature}` is not in schema {}",
                                        schema_path.display()
                                    ),
                                ));
                            } else if not_feature(feature) {
                                issues.push(issue_at(
                                file,
                                sel,
                                "features",
                                format!("`{feature}` is an entity key or the event time, not a feature"),
                            ));
                            }
                        }
                        features = list.clone();
                    }
                }
            }
        }
    }

    let online = parsed.online.filter(|o| o.enabled);
    let offline = parsed.offline.filter(|o| o.enabled);
    if let Some(online) = &online {
        issues.extend(online.check(file));
        if let (LayoutKind::Feast, Some(schema)) = (online.layout, &schema) {
            let types = crate::schema::arrow_schema_of_reader(schema).unwrap_or_default();
            for (name, data_type) in types.iter().filter(|(n, _)| features.contains(n)) {
                if !feast_supports(data_type) {
                    issues.push(ConfigIssue {
                        file: file.to_path_buf(),
                        line: None,
                        key: Some("online.layout".into()),
                        message: format!(
                            "feature `{name}` of type {data_type} has no Feast value type"
                        ),
                    });
                }
            }
        }
    }
    if let Some(offline) = &offline {
        issues.extend(offline.check(file));
        if let Some(schema) = &schema {
            issues.extend(offline_table_issues(
                file,
                schema,
                &keys.value,
                &event_time.value,
                &features,
                offline,
            ));
        }
    }
    if online.is_none() && offline.is_none() {
        issues.push(ConfigIssue {
            file: file.to_path_buf(),
            line: None,
            key: Some("online".into()),
            message: "both sinks are disabled; enable `online` or `offline`".into(),
        });
    }

    match schema {
        Some(schema) if issues.is_empty() => Ok(PipelineConfig {
            name: parsed.name.value,
            file: file.to_path_buf(),
            source: parsed.source,
            schema,
            format: parsed.schema.format,
            compatibility: parsed.schema.compatibility,
            reject_non_finite: parsed.schema.reject_non_finite,
            entity_keys: keys.value.clone(),
            event_time: event_time.value.clone(),
            features,
            online,
            offline,
        }),
        _ => Err(issues),
    }
}

/// Fields the offline Delta table cannot take (a name it adds itself, a type Delta lacks).
fn offline_table_issues(
    file: &Path,
    schema: &ReaderSchema,
    keys: &[String],
    event_time: &str,
    features: &[String],
    offline: &OfflineSinkConfig,
) -> Vec<ConfigIssue> {
    let Ok(types) = crate::schema::arrow_schema_of_reader(schema) else {
        return Vec::new();
    };
    let wanted = |name: &str| {
        keys.iter().any(|k| k == name) || name == event_time || features.iter().any(|f| f == name)
    };
    let fields: Vec<arrow::datatypes::Field> = types
        .into_iter()
        .filter(|(name, _)| wanted(name))
        .map(|(name, data_type)| arrow::datatypes::Field::new(name, data_type, true))
        .collect();
    match crate::sink::delta::desired_schema(
        &arrow::datatypes::Schema::new(fields),
        event_time,
        offline.partition_granularity,
    ) {
        Ok(_) => Vec::new(),
        Err(e) => vec![ConfigIssue {
            file: file.to_path_buf(),
            line: None,
            key: Some("offline".into()),
            message: format!("the offline table cannot take the schema: {e}"),
        }],
    }
}
