//! `feature-connector-loadgen produce …`, also reached as `feature-connector produce …`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The feature-connector load generator.
#[derive(Debug, Parser)]
#[command(name = "feature-connector-loadgen", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Publish deterministic sample events (Avro or JSON, as the pipeline reads) to its topic.
    Produce(feature_connector_loadgen::produce::ProduceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    feature_connector::cli::init_logging();
    feature_connector::cli::run_async(async move {
        match cli.command {
            Command::Produce(args) => feature_connector_loadgen::produce::produce(args).await,
        }
    })
}
