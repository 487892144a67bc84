//! `feature-connector schemas check|push`: local schema files against the broker's registry.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{print_config_error, ConfigArgs, EXIT_CONFIG};
use crate::config::PipelineConfig;
use crate::pulsar::SchemaRegistry;
use crate::pulsar::{resolve_partitions, PulsarServiceConfig, PulsarSource};
use crate::schema::{check_writer, schema_topic, Compatibility, WriterRejected};

/// Options of `schemas`.
#[derive(Debug, Args)]
pub struct SchemasArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Compare each pipeline's schema with every version registered on its topic; exit 1 if
    /// any version is incompatible under the pipeline's strategy.
    Check {
        #[command(flatten)]
        config: ConfigArgs,
        /// Pipelines to check (default: all).
        pipelines: Vec<String>,
    },
    /// Register each pipeline's schema file on its topic.
    Push {
        #[command(flatten)]
        config: ConfigArgs,
        /// Pipelines to push (default: all).
        pipelines: Vec<String>,
    },
}

/// Runs `schemas check` or `schemas push`.
pub async fn schemas(args: SchemasArgs) -> ExitCode {
    let (Action::Check {
        config,
        pipelines: names,
    }
    | Action::Push {
        config,
        pipelines: names,
    }) = &args.action;
    let (service, pipelines) = match config.load() {
        Ok(loaded) => loaded,
        Err(e) => {
            print_config_error(&e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let selected: Vec<&PipelineConfig> = pipelines
        .iter()
        .filter(|p| names.is_empty() || names.contains(&p.name))
        .collect();
    if let Some(missing) = names
        .iter()
        .find(|n| !pipelines.iter().any(|p| &p.name == *n))
    {
        eprintln!("error: no pipeline `{missing}`");
        return ExitCode::from(EXIT_CONFIG);
    }
    let admin = match service.pulsar.admin() {
        Ok(admin) => admin,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut registry = SchemaRegistry::new(admin);
    let mut failed = false;
    for pipeline in selected {
        let topics = match schema_topics(&service.pulsar, pipeline).await {
            Ok(topics) => topics,
            Err(e) => {
                eprintln!("{}: error: {e}", pipeline.name);
                failed = true;
                continue;
            }
        };
        for topic in &topics {
            let ok = match &args.action {
                Action::Check { .. } => check(&mut registry, pipeline, topic).await,
                Action::Push { .. } => push(&registry, pipeline, topic).await,
            };
            failed |= !ok;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The topics whose registries a pipeline reads: the named ones, and for a pattern those
/// matching it now (partitions share their topic's schema).
async fn schema_topics(
    service: &PulsarServiceConfig,
    pipeline: &PipelineConfig,
) -> Result<Vec<String>, String> {
    let mut topics = pipeline.source.named_topics();
    if pipeline.source.topic_pattern.is_some() {
        let pulsar = PulsarSource::connect(service)
            .await
            .map_err(|e| e.to_string())?;
        let matched = resolve_partitions(&pulsar, &pipeline.source)
            .await
            .map_err(|e| format!("cannot list the topics: {e}"))?;
        topics = matched
            .iter()
            .map(|t| schema_topic(t).to_string())
            .collect();
        topics.dedup();
        if topics.is_empty() {
            println!(
                "{}: no topic matches {} yet",
                pipeline.name,
                pipeline.source.describe_topics()
            );
        }
    }
    Ok(topics)
}

async fn check(registry: &mut SchemaRegistry, pipeline: &PipelineConfig, topic: &str) -> bool {
    let versions = match registry.all_versions(topic).await {
        Ok(versions) => versions,
        Err(e) => {
            eprintln!("{}: error: {e}", pipeline.name);
            return false;
        }
    };
    if versions.is_empty() {
        println!("{}: {topic} has no registered schema", pipeline.name);
        return true;
    }
    // A strategy that checks nothing still decodes by Avro resolution: report that.
    let strategy = if pipeline.compatibility.checks() {
        pipeline.compatibility
    } else {
        Compatibility::Backward
    };
    let mut all_ok = true;
    for version in versions {
        let label = format!("{}: {topic} version {}", pipeline.name, version.version);
        match check_writer(&pipeline.schema, pipeline.format, strategy, &version) {
            Ok(_) => println!("{label}: compatible ({strategy:?})"),
            Err(WriterRejected::Incompatible { problems, .. }) => {
                all_ok = false;
                println!("{label}: incompatible ({strategy:?})");
                for problem in problems {
                    println!("  {problem}");
                }
            }
            Err(rejected) => {
                all_ok = false;
                println!("{label}: incompatible: {rejected}");
            }
        }
    }
    all_ok
}

async fn push(registry: &SchemaRegistry, pipeline: &PipelineConfig, topic: &str) -> bool {
    match registry
        .push(
            topic,
            pipeline.format.registry_type(),
            &pipeline.schema.json,
        )
        .await
    {
        Ok(version) => {
            println!(
                "{}: registered on {topic} as version {version}",
                pipeline.name
            );
            true
        }
        Err(e) => {
            eprintln!("{}: the broker refused the schema: {e}", pipeline.name);
            false
        }
    }
}
