//! Command-line interface: `run`, `validate`, `produce`, `schemas`, `get`, `backfill`,
//! `offline`, `audit`.

mod audit;
mod backfill;
mod get;
mod logging;
mod offline;
mod produce;
mod run;
mod schemas;
mod training;
mod validate;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{load_pipelines, ConfigError, PipelineConfig, ServiceConfig};
pub use logging::init_logging;

/// Exit status for configuration errors (as `validate` documents).
pub const EXIT_CONFIG: u8 = 2;

/// feature-connector: Pulsar feature topics into Redis (online) and Delta Lake (offline).
#[derive(Debug, Parser)]
#[command(name = "feature-connector", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume every pipeline's topic into its sinks until SIGTERM/SIGINT.
    Run(ConfigArgs),
    /// Check the service file, every pipeline file and their schemas; exit 2 on problems.
    Validate(ConfigArgs),
    /// Publish deterministic sample events, Avro or JSON as the pipeline reads, to its topic
    /// (runs the separate `feature-connector-loadgen` binary installed beside this one).
    #[command(disable_help_flag = true)]
    Produce(produce::ProduceArgs),
    /// Read a retained topic into a pipeline's offline store only (idempotent).
    Backfill(backfill::BackfillArgs),
    /// Maintain a pipeline's offline Delta table: compact small files, vacuum old ones,
    /// upgrade a folder of an older version into the table.
    Offline(offline::OfflineArgs),
    /// Print the online feature values of entities as JSON.
    Get(get::GetArgs),
    /// Compare a pipeline's online rows with its offline table's newest rows (training-
    /// serving consistency); exit 1 when an entity is in a defect class.
    Audit(audit::AuditArgs),
    /// Compare local schema files with the topic's registered versions, or register them.
    Schemas(schemas::SchemasArgs),
}

/// Where the configuration is.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// Project root: relative paths in pipeline files (schemas, file:// stores) resolve here.
    #[arg(long, default_value = ".", env = "FC_ROOT")]
    root: PathBuf,
    /// Service file; the embedded config/default.yaml when not given.
    #[arg(long, env = "FC_CONFIG")]
    config: Option<PathBuf>,
    /// Folder of pipeline files; `<root>/connectors` when not given.
    #[arg(long, env = "FC_CONNECTORS")]
    connectors: Option<PathBuf>,
}

impl ConfigArgs {
    fn connectors_dir(&self) -> PathBuf {
        self.connectors
            .clone()
            .unwrap_or_else(|| self.root.join("connectors"))
    }

    /// Loads the service file and every pipeline, reporting all problems together.
    fn load(&self) -> Result<(ServiceConfig, Vec<PipelineConfig>), ConfigError> {
        let service = ServiceConfig::load(self.config.as_deref());
        let pipelines = load_pipelines(&self.connectors_dir(), &self.root);
        match (service, pipelines) {
            (Ok(service), Ok(pipelines)) => Ok((service, pipelines)),
            (service, pipelines) => {
                let mut issues = Vec::new();
                if let Err(e) = service {
                    issues.extend(e.issues);
                }
                if let Err(e) = pipelines {
                    issues.extend(e.issues);
                }
                Err(ConfigError { issues })
            }
        }
    }

    /// Loads the config and picks the pipeline `name`; prints why not and gives the exit
    /// code otherwise.
    pub fn load_pipeline(&self, name: &str) -> Result<(ServiceConfig, PipelineConfig), ExitCode> {
        let (service, pipelines) = self.load().map_err(|e| {
            print_config_error(&e);
            ExitCode::from(EXIT_CONFIG)
        })?;
        let names: Vec<&str> = pipelines.iter().map(|p| p.name.as_str()).collect();
        let known = names.join(", ");
        match pipelines.into_iter().find(|p| p.name == name) {
            Some(pipeline) => Ok((service, pipeline)),
            None => {
                eprintln!("error: no pipeline `{name}` (have: {known})");
                Err(ExitCode::from(EXIT_CONFIG))
            }
        }
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

/// Parses the command line and runs it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    run_async(async move {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Validate(args) => validate::validate(&args),
            Command::Produce(args) => produce::produce(&args),
            Command::Schemas(args) => schemas::schemas(args).await,
            Command::Get(args) => get::get(args).await,
            Command::Audit(args) => audit::audit(args).await,
            Command::Backfill(args) => backfill::backfill(args).await,
            Command::Offline(args) => offline::offline(args).await,
        }
    })
}

/// Runs `work` on a multi-threaded runtime with the process's TLS provider installed: the
/// start of this binary and of the load generator's.
pub fn run_async(work: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    crate::tls::install_crypto_provider();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(work),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print_config_error(error: &ConfigError) {
    for issue in &error.issues {
        eprintln!("error: {issue}");
    }
}
