//! A pipeline file's `aggregations:` and `entity.max_future_skew`, checked against the rest
//! of the pipeline: the tiles live in the online store, and the training sets are computed
//! from the offline table, which keeps the pipeline's features only.

use super::pipeline_file::{PipelineFile, SinkSections};
use super::{issue_at, ConfigIssue};
use crate::aggregate::{check_aggregations, Aggregation, Fields};
use crate::sink::PipelineShape;

/// How far ahead of its publish time an event may be stamped when a pipeline with
/// aggregations does not say.
pub const DEFAULT_FUTURE_SKEW_MS: i64 = 5 * 60 * 1000;

/// What the checks found: the aggregations that passed and the future skew allowed.
pub struct CheckedAggregations {
    /// The aggregations, in the file's order.
    pub aggregations: Vec<Aggregation>,
    /// `entity.max_future_skew` in ms: as written, else the default when there are
    /// aggregations, else none.
    pub max_future_skew_ms: Option<i64>,
}

/// Checks `parsed`'s aggregations and future skew against the rest of the pipeline
/// (`shape`: its features, and its schema's fields when the schema loaded).
pub fn check_aggregation_section(
    shape: &PipelineShape<'_>,
    parsed: &PipelineFile,
    sinks: &SinkSections,
    issues: &mut Vec<ConfigIssue>,
) -> CheckedAggregations {
    let (file, features, types) = (shape.file, shape.features, shape.types);
    let configs = parsed.aggregations.as_deref().unwrap_or_default();
    let skew =
        parsed
            .entity
            .max_future_skew
            .as_ref()
            .and_then(|written| match humantime::parse_duration(&written.value) {
                Ok(d) => Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                Err(e) => {
                    issues.push(issue_at(
                        file,
                        written,
                        "entity.max_future_skew",
                        format!("`{}` is not a duration ({e}); write e.g. 5m", written.value),
                    ));
                    None
                }
            });
    let max_future_skew_ms = skew.or((!configs.is_empty()).then_some(DEFAULT_FUTURE_SKEW_MS));
    let (Some(types), false) = (types, configs.is_empty()) else {
        return CheckedAggregations {
            aggregations: Vec::new(),
            max_future_skew_ms,
        };
    };
    if sinks.online.is_none() {
        issues.push(issue_at(
            file,
            &configs[0].name,
            "aggregations",
            "aggregations are kept and served by the online store; enable `online:`",
        ));
    }
    let mut taken: Vec<String> = parsed.entity.keys.value.clone();
    taken.push(parsed.entity.event_time.value.clone());
    taken.extend(features.iter().cloned());
    let (aggregations, found) = check_aggregations(
        file,
        configs,
        &Fields {
            types,
            taken: &taken,
        },
    );
    issues.extend(found);
    for (i, config) in configs.iter().enumerate() {
        let Some(column) = &config.column else {
            continue;
        };
        let known = types.iter().any(|(name, _)| *name == column.value);
        if known && !features.contains(&column.value) {
            issues.push(issue_at(
                file,
                column,
                &format!("aggregations[{i}].column"),
                format!(
                    "`{}` is not one of the pipeline's features; add it to `features` (the offline table keeps features only, and training sets are computed from it)",
                    column.value
                ),
            ));
        }
    }
    CheckedAggregations {
        aggregations,
        max_future_skew_ms,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::load_pipeline_texts;

    fn load(features: &str, rest: &str) -> Result<Vec<crate::config::PipelineConfig>, Vec<String>> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let text = format!(
            "name: p\nsource:\n  topic: persistent://public/default/t\n  subscription: s\n\
             schema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  \
             event_time: event_time\n{rest}{features}"
        );
        load_pipeline_texts([(Path::new("p.yaml"), text.as_str())], root)
            .map_err(|e| e.issues.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn aggregations_build_their_sink_and_default_the_future_skew() {
        let pipelines = load(
            "aggregations:\n  - {name: spend, function: sum, column: avg_basket_eur, windows: [1h, 1d]}\n",
            "online: {}\noffline: {}\n",
        )
        .expect("valid");
        let pipeline = &pipelines[0];
        assert_eq!(pipeline.aggregations.len(), 1);
        assert_eq!(
            pipeline.max_future_skew_ms,
            Some(super::DEFAULT_FUTURE_SKEW_MS)
        );
        let service = crate::config::ServiceConfig::load(None).expect("embedded service file");
        let kinds: Vec<&str> = pipeline
            .sink_builders(&service)
            .iter()
            .map(|b| b.kind())
            .collect();
        assert_eq!(kinds, ["online", "offline", "aggregations"]);
        let view = pipeline.feature_view().expect("online view");
        assert_eq!(view.plain_features(), 8);
        let names: Vec<&str> = view.features[8..].iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["spend_1h", "spend_1d"]);
    }

    #[test]
    fn the_section_needs_the_online_store_features_and_a_duration() {
        let issues = load(
            "features: [purchases_30d]\naggregations:\n  - {name: spend, function: sum, column: avg_basket_eur, windows: [1h]}\n",
            "  max_future_skew: soon\noffline: {}\n",
        )
        .expect_err("three problems");
        assert_eq!(
            issues,
            [
                "p.yaml:10: key `entity.max_future_skew`: `soon` is not a duration (expected number at 0); write e.g. 5m",
                "p.yaml:14: key `aggregations`: aggregations are kept and served by the online store; enable `online:`",
                "p.yaml:14: key `aggregations[0].column`: `avg_basket_eur` is not one of the pipeline's features; add it to `features` (the offline table keeps features only, and training sets are computed from it)",
            ]
        );
    }
}
