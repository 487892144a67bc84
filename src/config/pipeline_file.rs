//! A pipeline file (`connectors/*.yaml`) as written, and the list of sinks: one line per
//! sink kind gives it its pipeline-file key.

use serde::Deserialize;

use super::{ServiceConfig, Spanned};
use crate::aggregate::AggregationConfig;
use crate::delta::DeltaSinkConfig;
use crate::pulsar::PulsarSourceConfig;
use crate::redis::RedisSinkConfig;
use crate::schema::{Compatibility, PayloadFormat};
use crate::sink::{PipelineShape, SinkBuilder, SinkSection};
use crate::yaml::ConfigIssue;

/// Declares the pipeline file and the list of sink kinds, one line per sink:
/// `key: SectionType => service_field`, where `SectionType` (in the sink's folder) implements
/// [`SinkSection`] and `service_field` is the [`ServiceConfig`] section its builder reads.
macro_rules! sinks {
    ($($(#[$doc:meta])* $key:ident: $section:ty => $service:ident,)+) => {
        /// A pipeline file as written.
        #[derive(Debug, Clone, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct PipelineFile {
            /// Unique pipeline name; also the feature view name in Redis keys and the
            /// offline table name.
            pub name: Spanned<String>,
            /// Where the events come from.
            pub source: PulsarSourceConfig,
            /// The reader schema the pipeline expects.
            pub schema: SchemaRef,
            /// Which fields identify the entity and its event time.
            pub entity: EntityConfig,
            /// Which fields are features: `all` (every field that is not a key or the event
            /// time) or a list of names.
            #[serde(default)]
            pub features: Option<Spanned<FeatureSelection>>,
            /// Windowed aggregations of the events, served as features `<name>_<window>`.
            #[serde(default)]
            pub aggregations: Option<Vec<AggregationConfig>>,
            $($(#[$doc])* #[serde(default)] pub $key: Option<$section>,)+
        }

        /// A pipeline's enabled sinks, one field per sink kind.
        #[derive(Debug, Clone, Default)]
        pub struct SinkSections {
            $($(#[$doc])* pub $key: Option<$section>,)+
        }

        impl SinkSections {
            /// The pipeline-file keys of the sink kinds.
            pub const KINDS: &'static [&'static str] = &[$(stringify!($key),)+];

            /// The sections of `file` that are not turned off.
            pub(super) fn enabled_in(file: &PipelineFile) -> Self {
                SinkSections {
                    $($key: file.$key.clone().filter(SinkSection::enabled),)+
                }
            }

            /// Every enabled section's own checks.
            pub(super) fn check(&self, shape: &PipelineShape<'_>) -> Vec<ConfigIssue> {
                let mut issues = Vec::new();
                $(if let Some(section) = &self.$key {
                    issues.extend(section.check(shape));
                })+
                issues
            }

            /// `true` when no sink is enabled.
            pub fn is_empty(&self) -> bool {
                true $(&& self.$key.is_none())+
            }

            /// `online on, offline off`: which sinks are enabled.
            pub fn summary(&self) -> String {
                [$(format!("{} {}", stringify!($key), if self.$key.is_some() { "on" } else { "off" }),)+]
                    .join(", ")
            }

            /// The builders of the enabled sinks, in the order of the list.
            pub(super) fn builders(&self, service: &ServiceConfig) -> Vec<Box<dyn SinkBuilder>> {
                let mut builders: Vec<Box<dyn SinkBuilder>> = Vec::new();
                $(if let Some(section) = &self.$key {
                    builders.push(section.builder(&service.$service));
                })+
                builders
            }
        }
    };
}

sinks! {
    /// The Redis online sink; absent or `enabled: false` turns it off.
    online: RedisSinkConfig => redis,
    /// The offline sink (a Delta table); absent or `enabled: false` turns it off.
    offline: DeltaSinkConfig => object_store,
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
    /// How far after its publish time an event may be stamped (`5m`); later ones go to the
    /// dead-letter topic (`future_event_time`). Default: no limit, or 5 minutes in a
    /// pipeline with aggregations.
    #[serde(default)]
    pub max_future_skew: Option<Spanned<String>>,
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
