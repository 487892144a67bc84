//! The Delta sink's section of a pipeline file (`offline:`): its checks and its builder.

use arrow::datatypes::{DataType, Field, Schema};

use super::{
    check_store_url, desired_schema, DeltaSinkBuilder, DeltaSinkConfig, Granularity,
    ObjectStoreServiceConfig,
};
use crate::sink::{PipelineShape, SinkBuilder, SinkSection};
use crate::yaml::{issue_at, ConfigIssue};

impl SinkSection for DeltaSinkConfig {
    type Service = ObjectStoreServiceConfig;

    fn enabled(&self) -> bool {
        self.enabled
    }

    fn check(&self, pipeline: &PipelineShape<'_>) -> Vec<ConfigIssue> {
        let file = pipeline.file;
        let mut issues = Vec::new();
        if let Some(url) = &self.url {
            if let Err(message) = check_store_url(&url.value) {
                issues.push(issue_at(file, url, "offline.url", message));
            }
        }
        let plain = |key: &str, message: &str| ConfigIssue::at_key(file, key, message);
        if self.rollover_rows == 0 {
            issues.push(plain("offline.rollover_rows", "must be at least 1"));
        }
        if self.rollover_interval.is_zero() {
            issues.push(plain("offline.rollover_interval", "must be positive"));
        }
        if !(1..=22).contains(&self.zstd_level) {
            issues.push(plain("offline.zstd_level", "must be between 1 and 22"));
        }
        if self.row_group_rows == 0 {
            issues.push(plain("offline.row_group_rows", "must be at least 1"));
        }
        if self.checkpoint_interval == 0 {
            issues.push(plain("offline.checkpoint_interval", "must be at least 1"));
        }
        if let Some(types) = pipeline.types {
            issues.extend(table_issues(pipeline, types, self.partition_granularity));
        }
        issues
    }

    fn builder(&self, service: &ObjectStoreServiceConfig) -> Box<dyn SinkBuilder> {
        Box::new(DeltaSinkBuilder {
            service: service.clone(),
            config: self.clone(),
            gap_grace: None,
        })
    }
}

/// Fields the Delta table cannot take (a name it adds itself, a type Delta lacks).
fn table_issues(
    pipeline: &PipelineShape<'_>,
    types: &[(String, DataType)],
    granularity: Granularity,
) -> Vec<ConfigIssue> {
    let wanted = |name: &str| {
        pipeline.keys.iter().any(|k| k == name)
            || name == pipeline.event_time
            || pipeline.features.iter().any(|f| f == name)
    };
    let fields: Vec<Field> = types
        .iter()
        .filter(|(name, _)| wanted(name))
        .map(|(name, data_type)| Field::new(name, data_type.clone(), true))
        .collect();
    match desired_schema(&Schema::new(fields), pipeline.event_time, granularity) {
        Ok(_) => Vec::new(),
        Err(e) => vec![ConfigIssue::at_key(
            pipeline.file,
            "offline",
            format!("the offline table cannot take the schema: {e}"),
        )],
    }
}
