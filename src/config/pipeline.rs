//! Pipeline files (`connectors/*.yaml`): one Pulsar topic into the online and offline sinks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::aggregations::{check_aggregation_section, DEFAULT_FUTURE_SKEW_MS};
use super::pipeline_file::{FeatureSelection, PipelineFile, SinkSections};
use super::ServiceConfig;
use super::{issue_at, resolve_path, ConfigError, ConfigIssue};
use crate::aggregate::Aggregation;
use crate::delta::{StoreError, TableLocation, TableRoot};
use crate::pulsar::PulsarSourceConfig;
use crate::record::RowLayout;
use crate::redis::overlapping_key_spaces;
use crate::redis::tiles::{TileLayout, TileSinkBuilder};
use crate::schema::{Compatibility, DecoderSpec, PayloadFormat, ReaderSchema};
use crate::serving::FeatureView;
use crate::sink::{PipelineShape, SinkBuilder};
use crate::yaml::{parse_yaml_recovering, read_yaml_file_recovering};

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
    /// The enabled sinks.
    pub sinks: SinkSections,
    /// Windowed aggregations, kept by the `aggregations` sink beside the online one.
    pub aggregations: Vec<Aggregation>,
    /// How far after its publish time an event may be stamped, in ms (`None`: any).
    pub max_future_skew_ms: Option<i64>,
}

// Here rather than in service.rs: the service file's settings do not depend on pipelines.
impl ServiceConfig {
    /// Where `pipeline`'s offline table lives: its `offline.url`, or the store's default
    /// root; relative `file://` paths resolve against `root`.
    pub fn offline_table(
        &self,
        pipeline: &PipelineConfig,
        root: &Path,
    ) -> Result<TableLocation, StoreError> {
        let url = pipeline
            .sinks
            .offline
            .as_ref()
            .and_then(|o| o.url.as_ref())
            .map_or(self.object_store.default_url.as_str(), |u| u.value.as_str());
        TableRoot::open(url, root, &self.object_store.options)?.table(&pipeline.name)
    }
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

    /// The pipeline's enabled sinks, each as the builder the runtime turns into a running
    /// sink.
    pub fn sink_builders(&self, service: &ServiceConfig) -> Vec<Box<dyn SinkBuilder>> {
        let mut builders = self.sinks.builders(service);
        if let (Some(online), false) = (&self.sinks.online, self.aggregations.is_empty()) {
            builders.push(Box::new(TileSinkBuilder {
                service: service.redis.clone(),
                key_prefix: online.key_prefix.clone(),
                aggregations: self.aggregations.clone(),
                future_skew_ms: self.max_future_skew_ms.unwrap_or(DEFAULT_FUTURE_SKEW_MS),
            }));
        }
        builders
    }

    /// Where this pipeline's aggregation tiles are; `None` without aggregations.
    pub fn tile_layout(&self) -> Option<TileLayout> {
        let online = self.sinks.online.as_ref()?;
        (!self.aggregations.is_empty())
            .then(|| TileLayout::new(&online.key_prefix, &self.name, self.aggregations.clone()))
    }

    /// How readers see this pipeline's online features; `None` without an online sink.
    pub fn feature_view(&self) -> Option<FeatureView> {
        let online = self.sinks.online.as_ref()?;
        let types = crate::schema::arrow_schema_of_reader(&self.schema).unwrap_or_default();
        let view = FeatureView::new(
            &self.name,
            online,
            &self.entity_keys,
            &self.features,
            &types,
        );
        Some(match self.tile_layout() {
            Some(tiles) => view.with_aggregations(tiles),
            None => view,
        })
    }

    /// What a payload decoder for this pipeline needs.
    pub fn decoder_spec(&self) -> DecoderSpec {
        DecoderSpec {
            topic: self.source.primary_topic().unwrap_or_default().to_string(),
            reader: self.schema.clone(),
            format: self.format,
            compatibility: self.compatibility,
            reject_non_finite: self.reject_non_finite,
            max_future_skew_ms: self.max_future_skew_ms,
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
    // Each file is read when its turn comes, as it is checked.
    check_pipeline_files(
        files.into_iter().map(|file| {
            let parsed = read_yaml_file_recovering::<PipelineFile>(&file);
            (file, parsed)
        }),
        root,
    )
}

/// Checks pipeline texts as [`load_pipelines`] checks the files it reads, without reading
/// them: each `(file, text)` is a pipeline file's text and the path that messages name (and
/// that the duplicate-name check reports). Relative paths inside are resolved against
/// `root`. No texts give no pipelines.
pub fn load_pipeline_texts<'a>(
    files: impl IntoIterator<Item = (&'a Path, &'a str)>,
    root: &Path,
) -> Result<Vec<PipelineConfig>, ConfigError> {
    check_pipeline_files(
        files.into_iter().map(|(file, text)| {
            let parsed = parse_yaml_recovering::<PipelineFile>(file, text);
            (file.to_path_buf(), parsed)
        }),
        root,
    )
}

/// What a pipeline file's text parsed into (as far as it did) and the problems found.
type Parsed = (Option<PipelineFile>, Vec<ConfigIssue>);

/// The checks of [`load_pipelines`] on files as they are parsed, one at a time.
fn check_pipeline_files(
    files: impl Iterator<Item = (PathBuf, Parsed)>,
    root: &Path,
) -> Result<Vec<PipelineConfig>, ConfigError> {
    let mut issues = Vec::new();
    let mut pipelines = Vec::new();
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (file, (parsed, mut found)) in files {
        // A file with problems is still checked as far as it parsed once they were
        // repaired, so that one run names every problem of every file.
        issues.append(&mut found);
        let Some(parsed) = parsed else {
            continue;
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
    let online: Vec<_> = pipelines
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.file.as_path(), p.sinks.online.as_ref()?)))
        .collect();
    issues.extend(overlapping_key_spaces(&online));
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

    let sinks = SinkSections::enabled_in(&parsed);
    let types = schema
        .as_ref()
        .and_then(|s| crate::schema::arrow_schema_of_reader(s).ok());
    let shape = PipelineShape {
        file,
        keys: &keys.value,
        event_time: &event_time.value,
        features: &features,
        types: types.as_deref(),
    };
    issues.extend(sinks.check(&shape));
    let checked = check_aggregation_section(&shape, &parsed, &sinks, &mut issues);
    if sinks.is_empty() {
        issues.push(ConfigIssue {
            file: file.to_path_buf(),
            line: None,
            key: None,
            message: format!(
                "every sink is disabled; enable one of: {}",
                SinkSections::KINDS.join(", ")
            ),
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
            sinks,
            aggregations: checked.aggregations,
            max_future_skew_ms: checked.max_future_skew_ms,
        }),
        _ => Err(issues),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project with the repository's schema and one pipeline file whose sink sections are
    /// `sinks` (YAML).
    fn load_with_sinks(sinks: &str) -> Result<Vec<PipelineConfig>, ConfigError> {
        let root = tempfile::tempdir().expect("temp dir");
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/user_profile.avsc");
        std::fs::create_dir_all(root.path().join("schemas")).expect("schemas dir");
        std::fs::copy(schema, root.path().join("schemas/user_profile.avsc")).expect("schema");
        let connectors = root.path().join("connectors");
        std::fs::create_dir_all(&connectors).expect("connectors dir");
        let text = format!(
            "name: p\nsource:\n  topic: persistent://public/default/t\n  subscription: s\nschema:\n  file: schemas/user_profile.avsc\n\
             entity:\n  keys: [user_id]\n  event_time: event_time\n{sinks}"
        );
        std::fs::write(connectors.join("p.yaml"), text).expect("pipeline file");
        load_pipelines(&connectors, root.path())
    }

    #[test]
    fn the_list_builds_one_builder_per_enabled_sink_in_order() {
        let pipelines = load_with_sinks("online: {}\noffline: {}\n").expect("valid");
        let service = ServiceConfig::load(None).expect("embedded service file");
        let kinds: Vec<&str> = pipelines[0]
            .sink_builders(&service)
            .iter()
            .map(|b| b.kind())
            .collect();
        assert_eq!(kinds, ["online", "offline"]);
        assert_eq!(pipelines[0].sinks.summary(), "online on, offline on");

        let pipelines = load_with_sinks("online: {enabled: false}\noffline: {}\n").expect("valid");
        assert_eq!(pipelines[0].sink_builders(&service).len(), 1);
        assert_eq!(pipelines[0].sinks.summary(), "online off, offline on");
    }

    #[test]
    fn texts_are_checked_as_the_files_holding_them() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let good = "name: p\nsource:\n  topic: persistent://public/default/t\n  subscription: s\n\
                    schema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  \
                    event_time: event_time\nonline: {}\n";
        let bad = "name: q\nsource:\n  topic: persistent://public/default/t\n  subscripton: s\n";
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("a.yaml"), good).expect("a");
        std::fs::write(dir.path().join("b.yaml"), bad).expect("b");
        let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
        let from_files = load_pipelines(dir.path(), root)
            .expect_err("b is bad")
            .issues;
        let from_texts = load_pipeline_texts([(a.as_path(), good), (b.as_path(), bad)], root)
            .expect_err("b is bad")
            .issues;
        assert_eq!(from_texts, from_files);
        let loaded = load_pipeline_texts([(a.as_path(), good)], root).expect("a is good");
        assert_eq!(
            (loaded[0].name.as_str(), loaded[0].file.as_path()),
            ("p", a.as_path())
        );
        let twice = load_pipeline_texts([(a.as_path(), good), (b.as_path(), good)], root)
            .expect_err("the same name twice");
        assert!(
            twice.issues[0].message.contains("already used by"),
            "{}",
            twice.issues[0]
        );
    }

    #[test]
    fn every_sink_disabled_names_the_kinds_and_a_sections_own_check_runs() {
        let err = load_with_sinks("online: {enabled: false}\n").expect_err("no sink");
        assert!(
            err.issues[0].message.contains("online, offline"),
            "{}",
            err.issues[0]
        );
        let err = load_with_sinks("offline: {rollover_rows: 0}\n").expect_err("bad section");
        assert_eq!(
            err.issues[0].key.as_deref(),
            Some("offline.rollover_rows"),
            "{}",
            err.issues[0]
        );
    }
}
