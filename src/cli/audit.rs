//! `feature-connector audit`: compares a pipeline's online rows with its offline table's
//! newest rows; exits 1 when an entity is in a defect class.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::{ConfigArgs, EXIT_CONFIG};
use crate::audit::{AuditTarget, EntityKey, Selection};
use crate::config::{PipelineConfig, ServiceConfig};
use crate::delta::TableRoot;

/// Exit status when an entity is in a defect class (table ahead, skew, missing online).
pub const EXIT_DEFECTS: u8 = 1;
/// Exit status when a store could not be read.
pub const EXIT_UNREADABLE: u8 = 3;

/// Options of `audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Pipeline to audit (it needs both an online and an offline sink).
    #[arg(long)]
    pipeline: String,
    /// Entities to compare, chosen by key hash (the same ones on every run), or `all`.
    #[arg(long, default_value = "10000", conflicts_with = "entities")]
    sample: String,
    /// A file naming the entities to compare, one per line as `key=value[,key2=value2]`.
    #[arg(long)]
    entities: Option<PathBuf>,
    /// Only entities with an event in this last stretch of time (e.g. `24h`); the table's
    /// older partitions are not read.
    #[arg(long, value_parser = humantime::parse_duration)]
    since: Option<Duration>,
    /// Compare the log of served features (`serving.feature_logging`) with the table at
    /// each request's time instead of the online store now.
    #[arg(long, conflicts_with_all = ["entities", "since"])]
    served: bool,
    /// Where the served-feature logs are (default: `serving.feature_logging.url`).
    #[arg(long, requires = "served")]
    log_url: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the audit and prints its report.
pub async fn audit(args: AuditArgs) -> ExitCode {
    let (service, pipeline) = match args.config.load_pipeline(&args.pipeline) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let target = match audit_target(&service, &pipeline, args.config.root()) {
        Some(Ok(target)) => target,
        Some(Err(e)) => {
            eprintln!("error: pipeline `{}`: {e}", pipeline.name);
            return ExitCode::from(EXIT_CONFIG);
        }
        None => {
            eprintln!(
                "error: pipeline `{}` needs both an online and an offline sink to be audited",
                pipeline.name
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let selection = match selection(&args, &target) {
        Ok(selection) => selection,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let since_ms = args.since.map(|since| {
        chrono::Utc::now().timestamp_millis() - i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    });
    let audited = if args.served {
        let url = args.log_url.clone().or_else(|| {
            service
                .serving
                .feature_logging
                .as_ref()
                .and_then(|logging| logging.url.clone())
        });
        let Some(url) = url else {
            eprintln!("error: --served: no serving.feature_logging.url in the service file; give --log-url");
            return ExitCode::from(EXIT_CONFIG);
        };
        let log = match TableRoot::open(&url, args.config.root(), &service.object_store.options)
            .and_then(|root| root.table(&pipeline.name))
        {
            Ok(log) => log,
            Err(e) => {
                eprintln!("error: --served: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
        crate::audit::audit_served(&target, log, selection).await
    } else {
        crate::audit::audit(&target, selection, since_ms).await
    };
    let report = match audited {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_UNREADABLE);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", report.to_text());
    }
    if report.defects > 0 {
        ExitCode::from(EXIT_DEFECTS)
    } else {
        ExitCode::SUCCESS
    }
}

/// What an audit of `pipeline` compares; `None` when it lacks the online or offline sink.
pub fn audit_target(
    service: &ServiceConfig,
    pipeline: &PipelineConfig,
    root: &Path,
) -> Option<Result<AuditTarget, crate::delta::StoreError>> {
    let view = pipeline.feature_view()?;
    pipeline.sinks.offline.as_ref()?;
    Some(
        service
            .offline_table(pipeline, root)
            .map(|table| AuditTarget {
                pipeline: pipeline.name.clone(),
                view,
                layout: pipeline.row_layout(),
                table,
                redis: service.redis.clone(),
                aggregations: pipeline.event_source(),
            }),
    )
}

fn selection(args: &AuditArgs, target: &AuditTarget) -> Result<Selection, String> {
    if let Some(path) = &args.entities {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--entities {}: {e}", path.display()))?;
        return named_entities(&text, target)
            .map(Selection::Named)
            .map_err(|(line, why)| format!("{}:{line}: {why}", path.display()));
    }
    match args.sample.as_str() {
        "all" => Ok(Selection::All),
        number => match number.replace('_', "").parse::<usize>() {
            Ok(n) if n > 0 => Ok(Selection::Sample(n)),
            _ => Err(format!(
                "--sample `{number}`: give a number of entities (at least 1) or `all`"
            )),
        },
    }
}

/// Entities written one per line as `key=value[,key2=value2]` (blank lines and `#` comments
/// skipped), as key values in the view's key order; or the line and why not.
fn named_entities(text: &str, target: &AuditTarget) -> Result<HashSet<EntityKey>, (usize, String)> {
    let mut entities = HashSet::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut pairs = Vec::new();
        for pair in line.split(',') {
            let Some((key, value)) = pair.split_once('=') else {
                return Err((index + 1, format!("`{pair}`: write key=value")));
            };
            pairs.push((key.trim(), value.trim()));
        }
        let entity = target
            .view
            .keys
            .iter()
            .map(|(name, _)| {
                pairs
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| (*value).to_string())
                    .ok_or_else(|| {
                        (
                            index + 1,
                            format!(
                                "missing `{name}` (the view is keyed by {})",
                                target.view.key_names()
                            ),
                        )
                    })
            })
            .collect::<Result<EntityKey, _>>()?;
        entities.insert(entity);
    }
    Ok(entities)
}
