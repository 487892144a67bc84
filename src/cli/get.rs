//! `feature-connector get`: online feature values of entities, as JSON.

use std::collections::HashMap;
use std::process::ExitCode;

use clap::Args;

use super::{print_config_error, ConfigArgs, EXIT_CONFIG};
use crate::config::PipelineConfig;
use crate::serving::FeatureReader;

/// Options of `get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Pipeline (feature view) to read.
    #[arg(long)]
    pipeline: String,
    /// Entity as `key=value[,key2=value2]`; repeat for several entities.
    #[arg(long = "entity", required = true)]
    entities: Vec<String>,
    /// Features to return (comma-separated); default: all of the view.
    #[arg(long, value_delimiter = ',')]
    features: Option<Vec<String>>,
}

/// Prints one JSON object per entity (an array for several).
pub async fn get(args: GetArgs) -> ExitCode {
    let (service, pipelines) = match args.config.load() {
        Ok(loaded) => loaded,
        Err(e) => {
            print_config_error(&e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let mut entities = Vec::with_capacity(args.entities.len());
    for written in &args.entities {
        let mut entity = HashMap::new();
        for pair in written.split(',') {
            let Some((key, value)) = pair.split_once('=') else {
                eprintln!("error: --entity `{written}`: write key=value");
                return ExitCode::from(EXIT_CONFIG);
            };
            entity.insert(key.trim().to_string(), value.trim().to_string());
        }
        entities.push(entity);
    }
    let reader = match FeatureReader::connect(
        &service.redis,
        pipelines.iter().filter_map(PipelineConfig::feature_view),
    )
    .await
    {
        Ok(reader) => reader,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match reader
        .get(&args.pipeline, &entities, args.features.as_deref())
        .await
    {
        Ok(mut results) => {
            let shown = if results.len() == 1 {
                results.remove(0)
            } else {
                serde_json::Value::Array(results)
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&shown).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(e) if e.is_client_error() => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
