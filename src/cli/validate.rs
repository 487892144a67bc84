//! `feature-connector validate`.

use std::process::ExitCode;

use super::{print_config_error, ConfigArgs, EXIT_CONFIG};
use crate::config::{ConfigError, PipelineConfig, ServiceConfig};
use crate::pipeline::plan_lanes;
use crate::pulsar::Delivery;
use crate::serving::FeatureView;

/// What the pipeline's `delivery` gives and gives up, for `validate`.
fn delivery_trade_off(delivery: Delivery) -> &'static str {
    match delivery {
        Delivery::Shared => "delivery shared: each event is delivered and decoded once for all sinks; a message is acknowledged when every sink has it durable, so while one sink's service is down the others pause too (nothing is lost; `delivery: per_sink` keeps them independent at twice the broker and decode work)",
        Delivery::PerSink => "delivery per_sink: each sink has its own subscription, acknowledges at its own pace and keeps going while another sink's service is down, at the price of delivering and decoding every event once per sink (`delivery: shared` halves that work)",
    }
}

/// Prints every problem as `file:line: key `k`: message` and exits 2, or summarises.
pub fn validate(args: &ConfigArgs) -> ExitCode {
    match args.load() {
        Ok((service, pipelines)) => {
            let file = ServiceConfig::file(args.config.as_deref());
            let views: Vec<FeatureView> = pipelines
                .iter()
                .filter_map(PipelineConfig::feature_view)
                .collect();
            let mut issues =
                crate::serving::feature_service_issues(&file, &service.serving, &views);
            issues.extend(crate::serving::feature_logging_issues(
                &file,
                &service.serving,
                &views,
            ));
            if !issues.is_empty() {
                let error = ConfigError { issues };
                print_config_error(&error);
                eprintln!("{} problem(s) found", error.issues.len());
                return ExitCode::from(EXIT_CONFIG);
            }
            // Without online views nothing is served, so an open bind exposes nothing.
            let warning = crate::serving::unguarded_warning(&file, &service.serving);
            if let Some(warning) = warning.filter(|_| !views.is_empty()) {
                eprintln!("warning: {warning}");
            }
            for pipeline in &pipelines {
                println!(
                    "ok: {} ({}): topic {}, {} feature(s), {}",
                    pipeline.name,
                    pipeline.file.display(),
                    pipeline.source.describe_topics(),
                    pipeline.features.len(),
                    pipeline.sinks.summary(),
                );
                let builders = pipeline.sink_builders(&service);
                let lanes = plan_lanes(pipeline, &builders);
                for lane in &lanes {
                    let kinds: Vec<&str> = lane.sinks.iter().map(|&i| builders[i].kind()).collect();
                    println!(
                        "  subscription `{}` ({}, {:?} acknowledgement) feeds {}",
                        lane.subscription,
                        lane.kind.as_str(),
                        lane.acknowledgement,
                        kinds.join(" + "),
                    );
                }
                if builders.len() > 1 {
                    println!("  {}", delivery_trade_off(pipeline.source.delivery));
                }
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
