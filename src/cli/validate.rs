//! `feature-connector validate`.

use std::process::ExitCode;

use super::{print_config_error, ConfigArgs, EXIT_CONFIG};

/// Prints every problem as `file:line: key `k`: message` and exits 2, or summarises.
pub fn validate(args: &ConfigArgs) -> ExitCode {
    match args.load() {
        Ok((_, pipelines)) => {
            for pipeline in &pipelines {
                println!(
                    "ok: {} ({}): topic {}, {} feature(s), {}",
                    pipeline.name,
                    pipeline.file.display(),
                    pipeline.source.describe_topics(),
                    pipeline.features.len(),
                    pipeline.sinks.summary(),
                );
            }
            println!("{} pipeline(s) valid", pipelines.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            print_config_error(&e);
            eprintln!("{} problem(s) found", e.issues.len());
            ExitCode::from(EXIT_CONFIG)
        }
    }
}
