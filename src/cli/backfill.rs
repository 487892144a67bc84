//! `feature-connector backfill`: a retained topic into a pipeline's offline store only.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::{ConfigArgs, EXIT_CONFIG};
use crate::pipeline::{backfill as run_backfill, BackfillRange};

/// Options of `backfill`.
#[derive(Debug, Args)]
pub struct BackfillArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Pipeline whose topic and offline sink to use.
    #[arg(long)]
    pipeline: String,
    /// `earliest`, or an RFC 3339 time: messages published from then on.
    #[arg(long, default_value = "earliest")]
    from: String,
    /// RFC 3339 time: messages published up to then (default: up to the last one at start).
    #[arg(long)]
    to: Option<String>,
    /// Write to this store URL instead of the pipeline's offline URL.
    #[arg(long)]
    offline_url: Option<String>,
}

fn parse_time(flag: &str, text: &str) -> anyhow::Result<u64> {
    let time = chrono::DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("--{flag} `{text}`: not an RFC 3339 time"))?;
    Ok(u64::try_from(time.timestamp_millis()).unwrap_or(0))
}

/// Shows a progress bar on a terminal and prints a summary line.
pub async fn backfill(args: BackfillArgs) -> ExitCode {
    let (service, pipeline) = match args.config.load_pipeline(&args.pipeline) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let pipeline = &pipeline;
    let from_ms = match args.from.as_str() {
        "earliest" => Ok(None),
        text => parse_time("from", text).map(Some),
    };
    let to_ms = args.to.as_deref().map(|t| parse_time("to", t)).transpose();
    let (from_ms, to_ms) = match (from_ms, to_ms) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {pos}/{len} messages  {per_sec}  ETA {eta}  [{bar:30}]",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let range = BackfillRange {
        from_ms,
        to_ms,
        offline_url: args.offline_url.clone(),
    };
    // Ctrl-C stops the read and commits what was read (the next run goes on from there).
    let cancel = tokio_util::sync::CancellationToken::new();
    let interrupt = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        })
    };
    let result = run_backfill(
        &service,
        pipeline,
        args.config.root(),
        &range,
        cancel,
        |done, total| {
            if let Some(total) = total {
                bar.set_length(total.max(done));
            }
            bar.set_position(done);
        },
    )
    .await;
    interrupt.abort();
    bar.finish_and_clear();
    match result {
        Ok(summary) => {
            println!(
                "backfill {}: {} messages, {} rows, {} undecodable; table version {} has {} files ({} bytes); {:.2} s ({:.0} messages/s)",
                pipeline.name,
                summary.messages,
                summary.rows,
                summary.undecodable,
                summary.version,
                summary.files,
                summary.bytes,
                summary.seconds,
                summary.messages as f64 / summary.seconds.max(1e-9)
            );
            if summary.left_out > 0 {
                eprintln!(
                    "note: {} rows were not written: they do not continue from what the table holds for their partition (a range that starts after it); the live pipeline writes them",
                    summary.left_out
                );
            }
            if let Some(why) = &summary.nothing_retained {
                eprintln!("note: {why}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
