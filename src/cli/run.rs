//! `feature-connector run`.

use std::process::ExitCode;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{print_config_error, ConfigArgs, EXIT_CONFIG};
use crate::config::PipelineConfig;

/// Runs all pipelines until SIGTERM/SIGINT, then drains within the shutdown deadline.
pub async fn run(args: ConfigArgs) -> ExitCode {
    let (service, pipelines) = match args.load() {
        Ok(loaded) => loaded,
        Err(e) => {
            print_config_error(&e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let cancel = CancellationToken::new();
    let deadline = service.shutdown_timeout;
    let signals = tokio::spawn(wait_for_signal(cancel.clone()));
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let health = Arc::new(crate::health::Health::default());
    let http = if service.http.bind.is_empty() {
        None
    } else {
        let reader = if pipelines.iter().any(|p| p.sinks.online.is_some()) {
            match crate::sink::redis::OnlineReader::connect(
                &service.redis,
                pipelines.iter().filter_map(PipelineConfig::online_view),
            )
            .await
            {
                Ok(reader) => Some(Arc::new(reader)),
                Err(e) => {
                    tracing::warn!(error = %e, "online reads disabled: Redis not reachable at start");
                    None
                }
            }
        } else {
            None
        };
        let state = crate::http::AppState {
            metrics: metrics.clone(),
            health: health.clone(),
            reader,
        };
        match crate::http::serve(&service.http.bind, state, cancel.clone()).await {
            Ok(task) => Some(task),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    tracing::info!(pipelines = pipelines.len(), "starting");
    let runtime = crate::pipeline::run(
        &service,
        &pipelines,
        args.root(),
        metrics,
        health,
        cancel.clone(),
    );
    tokio::pin!(runtime);
    let outcome = tokio::select! {
        outcome = &mut runtime => outcome,
        () = async { cancel.cancelled().await; tokio::time::sleep(deadline).await } => {
            tracing::error!(?deadline, "shutdown deadline passed; exiting without the last acknowledgements");
            signals.abort();
            return ExitCode::FAILURE;
        }
    };
    signals.abort();
    cancel.cancel();
    if let Some(http) = http {
        let _ = http.await;
    }
    match outcome {
        Ok(()) => {
            tracing::info!("stopped cleanly");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "stopped with an error");
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn wait_for_signal(cancel: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    cancel.cancel();
}
