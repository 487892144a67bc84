//! `feature-connector offline compact|vacuum|upgrade`: maintenance of a pipeline's Delta
//! table (compact and vacuum are safe while the connector runs); `offline training-set` is
//! [`super::training`]'s.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use super::{ConfigArgs, EXIT_CONFIG};
use crate::config::{PipelineConfig, ServiceConfig};
use crate::delta::ops::{self, plan_compaction};
use crate::delta::{metadata_keys, writer_properties, FileCount, Table, TableRoot, TableSpec};

/// Options of `offline`.
#[derive(Debug, Args)]
pub struct OfflineArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Write a training set: each row of an entity file (join keys and a timestamp) with
    /// the pipeline's aggregated features as the online store served them at that time,
    /// computed from the table; or print the same as SQL (`--sql duckdb|spark`).
    TrainingSet(super::training::TrainingSetArgs),
    /// Rewrite the small files of closed partitions into large ones, in one commit that
    /// readers see as no data change.
    Compact {
        #[command(flatten)]
        config: ConfigArgs,
        /// Pipeline whose table to compact.
        #[arg(long)]
        pipeline: String,
        /// Only partitions (hours or days) that ended at least this long ago.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// Files at least this large are left alone; small ones are packed up to it (MiB).
        #[arg(long, default_value_t = 128)]
        target_mib: u64,
    },
    /// Turn a folder of the earlier format (Parquet files, no table) into the pipeline's Delta
    /// table in place: each row once, topic positions kept, old files deleted. Stop the
    /// connector first.
    Upgrade {
        #[command(flatten)]
        config: ConfigArgs,
        /// Pipeline whose folder to upgrade.
        #[arg(long)]
        pipeline: String,
    },
    /// Delete data files no version references any more (replaced by a compaction, or
    /// written by a rollover whose commit never landed) once they are older than `--retain`.
    Vacuum {
        #[command(flatten)]
        config: ConfigArgs,
        /// Pipeline whose table to vacuum.
        #[arg(long)]
        pipeline: String,
        /// Keep unreferenced files younger than this (readers of older versions, rollovers
        /// being committed right now).
        #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
        retain: Duration,
        /// Allow `--retain` below one hour: only when no connector or backfill is writing
        /// to the table (a rollover's files exist shortly before its commit does).
        #[arg(long)]
        allow_short_retention: bool,
        /// Print what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// The shortest `--retain` allowed while writers may be running.
const SAFE_RETENTION: Duration = Duration::from_secs(3600);

/// Runs `offline compact` or `offline vacuum`.
pub async fn offline(args: OfflineArgs) -> ExitCode {
    let (config, pipeline) = match args.action {
        Action::TrainingSet(training) => {
            return super::training::training_set_command(training).await
        }
        Action::Compact {
            ref config,
            ref pipeline,
            ..
        }
        | Action::Vacuum {
            ref config,
            ref pipeline,
            ..
        }
        | Action::Upgrade {
            ref config,
            ref pipeline,
        } => (config, pipeline),
    };
    let (service, pipeline) = match config.load_pipeline(pipeline) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let Some(offline) = pipeline.sinks.offline.clone() else {
        eprintln!("error: pipeline `{}` has no offline sink", pipeline.name);
        return ExitCode::from(EXIT_CONFIG);
    };
    if matches!(args.action, Action::Upgrade { .. }) {
        return match upgrade(&service, &pipeline, config, &offline).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let mut table = match open(&service, &pipeline, config).await {
        Ok(table) => table,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = match args.action {
        Action::Compact {
            older_than,
            target_mib,
            ..
        } => compact(&mut table, &offline, older_than, target_mib * 1024 * 1024).await,
        Action::Vacuum {
            retain,
            allow_short_retention,
            dry_run,
            ..
        } => {
            if retain < SAFE_RETENTION && !allow_short_retention {
                eprintln!(
                    "error: --retain {} is below 1h: a running connector's rollover files exist shortly before their commit, and vacuum would delete them; pass --allow-short-retention if nothing writes to the table",
                    humantime::format_duration(retain)
                );
                return ExitCode::from(EXIT_CONFIG);
            }
            vacuum(&mut table, retain, dry_run).await
        }
        Action::Upgrade { .. } | Action::TrainingSet(_) => Ok(()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn open(
    service: &ServiceConfig,
    pipeline: &PipelineConfig,
    config: &ConfigArgs,
) -> anyhow::Result<Table> {
    let location = service.offline_table(pipeline, config.root())?;
    Ok(Table::open_existing(location).await?)
}

fn describe(count: FileCount) -> String {
    format!("{} files, {} bytes", count.files, count.bytes)
}

fn bar(total: usize, what: &str) -> ProgressBar {
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressBar::new(total as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {what} {{pos}}/{{len}} files  [{{bar:30}}]  ETA {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

async fn compact(
    table: &mut Table,
    offline: &crate::delta::DeltaSinkConfig,
    older_than: Duration,
    target_bytes: u64,
) -> anyhow::Result<()> {
    let files = table.active_files().await?;
    let before = FileCount::of(&files);
    let groups = plan_compaction(
        &files,
        chrono::Utc::now().timestamp_millis(),
        older_than,
        target_bytes,
    );
    let rewritten: usize = groups.iter().map(|g| g.files.len()).sum();
    println!(
        "{}: {} in table version {}; {rewritten} small files in {} groups to rewrite",
        table.url(),
        describe(before),
        table.version(),
        groups.len()
    );
    if groups.is_empty() {
        return Ok(());
    }
    let properties = writer_properties(
        offline,
        vec![(metadata_keys::PIPELINE.to_string(), "compacted".to_string())],
    )?;
    let progress = bar(rewritten, "compacting");
    let version = ops::compact(table, &groups, properties, |done| {
        progress.set_position(done as u64)
    })
    .await?;
    progress.finish_and_clear();
    let after = FileCount::of(&table.active_files().await?);
    println!(
        "compacted into version {version}: before {}, after {} (replaced files stay on storage until `offline vacuum`)",
        describe(before),
        describe(after)
    );
    Ok(())
}

async fn vacuum(table: &mut Table, retain: Duration, dry_run: bool) -> anyhow::Result<()> {
    let before = table.stored_files().await?;
    let active = FileCount::of(&table.active_files().await?);
    println!(
        "{}: {} on storage, {} referenced by version {}",
        table.url(),
        describe(before),
        describe(active),
        table.version()
    );
    let progress = bar(0, "vacuuming");
    progress.enable_steady_tick(Duration::from_millis(200));
    let deleted = ops::vacuum(table, retain, dry_run).await?;
    progress.finish_and_clear();
    if dry_run {
        for path in &deleted {
            println!("would delete {path}");
        }
        println!("dry run: {} files would be deleted", deleted.len());
        return Ok(());
    }
    let after = table.stored_files().await?;
    println!(
        "vacuumed: {} deleted; before {}, after {}",
        deleted.len(),
        describe(before),
        describe(after)
    );
    Ok(())
}

async fn upgrade(
    service: &ServiceConfig,
    pipeline: &PipelineConfig,
    config: &ConfigArgs,
    offline: &crate::delta::DeltaSinkConfig,
) -> anyhow::Result<()> {
    let url = offline
        .url
        .as_ref()
        .map_or(service.object_store.default_url.as_str(), |u| {
            u.value.as_str()
        });
    let store = TableRoot::open(url, config.root(), &service.object_store.options)?;
    let decoder = crate::schema::PayloadDecoder::new(
        pipeline.decoder_spec(),
        crate::pulsar::SchemaRegistry::new(service.pulsar.admin()?),
    )
    .context("reader schema")?;
    let rows = crate::schema::TopicDecoders::new(decoder, Vec::new()).output_schema();
    let spec = TableSpec::new(&store, &pipeline.name, &rows, &pipeline.event_time, offline)?;
    let properties = writer_properties(
        offline,
        vec![(metadata_keys::PIPELINE.to_string(), pipeline.name.clone())],
    )?;
    let progress = bar(0, "reading");
    let report = ops::upgrade(&spec, properties, |done, total| {
        progress.set_length(total as u64);
        progress.set_position(done as u64);
    })
    .await?;
    progress.finish_and_clear();
    println!(
        "{}: {} old-format files ({} bytes): {} rows converted{}, {} old files deleted, {} files of incomplete batches left for `offline vacuum`",
        spec.location.url,
        report.legacy_files,
        report.legacy_bytes,
        report.rows,
        report
            .version
            .map_or(String::new(), |v| format!(" in table version {v}")),
        report.deleted,
        report.incomplete.len()
    );
    Ok(())
}
