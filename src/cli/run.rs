//! `feature-connector run`.

use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{print_config_error, ConfigArgs, EXIT_CONFIG};
use crate::config::{ConfigError, PipelineConfig, ServiceConfig};
use crate::http::ProbeState;
use crate::metrics::Metrics;
use crate::serving::{FeatureLog, FeatureLogError, FeatureReader, FeatureView, ReadCache, Reads};

/// Runs all pipelines until SIGTERM/SIGINT, then drains within the shutdown deadline.
pub async fn run(args: ConfigArgs) -> ExitCode {
    // Before anything else: a SIGTERM during start-up (a rollout that moves on quickly)
    // then stops the connector cleanly instead of killing it by the signal's default action.
    let cancel = CancellationToken::new();
    let signals = match ShutdownSignals::install() {
        Ok(signals) => tokio::spawn(signals.wait(cancel.clone())),
        Err(e) => {
            eprintln!("error: cannot install the SIGTERM/SIGINT handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (service, pipelines) = match args.load() {
        Ok(loaded) => loaded,
        Err(e) => {
            print_config_error(&e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let file = ServiceConfig::file(args.config.as_deref());
    let views: Vec<FeatureView> = pipelines
        .iter()
        .filter_map(PipelineConfig::feature_view)
        .collect();
    let token = match serving_checks(&file, &service, &views) {
        Ok(token) => token,
        Err(e) => {
            print_config_error(&e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let deadline = service.shutdown_timeout;
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let health = Arc::new(crate::health::Health::default());
    let mut listeners = Vec::new();
    if !service.http.bind.is_empty() {
        let state = ProbeState {
            metrics: metrics.clone(),
            health: health.clone(),
        };
        match crate::http::serve_probes(&service.http.bind, state, cancel.clone()).await {
            Ok(task) => listeners.push(task),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if views.is_empty() {
        // Nothing to read: no listener, so that offline-only replicas on one host do not
        // compete for the serving port.
        tracing::info!("no pipeline has an online sink; feature reads are not served");
    } else if !service.serving.bind.is_empty() {
        let log = match feature_log(&service, &views, &args, &metrics, &cancel) {
            Ok(Some((log, task))) => {
                listeners.push(task);
                Some(log)
            }
            Ok(None) => None,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let reads = online_reads(&service, views, &metrics);
        match crate::serving::serve_reads(
            &service.serving,
            token,
            reads,
            log,
            metrics.clone(),
            cancel.clone(),
        )
        .await
        {
            Ok(task) => listeners.push(task),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if service.audit.enabled {
        let targets = pipelines
            .iter()
            .filter_map(|p| super::audit::audit_target(&service, p, args.root()))
            .filter_map(Result::ok)
            .collect();
        tokio::spawn(crate::audit::continuous::run(
            service.audit.clone(),
            targets,
            metrics.clone(),
            cancel.clone(),
        ));
    }
    // The integration tests wait for this line before they send SIGTERM.
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
    for listener in listeners {
        let _ = listener.await;
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

/// The serving section checked against the pipelines: the token reads must carry (`None`
/// for an open loopback listener, or when nothing is served for lack of online views), or
/// every problem (exit 2, like other config errors).
fn serving_checks(
    file: &std::path::Path,
    service: &ServiceConfig,
    views: &[FeatureView],
) -> Result<Option<String>, ConfigError> {
    let mut issues = crate::serving::feature_service_issues(file, &service.serving, views);
    issues.extend(crate::serving::feature_logging_issues(
        file,
        &service.serving,
        views,
    ));
    let token = if views.is_empty() {
        None
    } else {
        match crate::serving::serving_token(file, &service.serving) {
            Ok(token) => token,
            Err(issue) => {
                issues.push(issue);
                None
            }
        }
    };
    if issues.is_empty() {
        Ok(token)
    } else {
        Err(ConfigError { issues })
    }
}

/// The feature log (`serving.feature_logging`) and its writer task, when configured. The task
/// ends once the serving listener has drained, having committed what it holds.
fn feature_log(
    service: &ServiceConfig,
    views: &[FeatureView],
    args: &ConfigArgs,
    metrics: &Metrics,
    cancel: &CancellationToken,
) -> Result<Option<(FeatureLog, tokio::task::JoinHandle<()>)>, FeatureLogError> {
    let Some(config) = &service.serving.feature_logging else {
        return Ok(None);
    };
    FeatureLog::start(
        config,
        views,
        args.root(),
        &service.object_store.options,
        metrics,
        cancel.clone(),
    )
    .map(Some)
}

/// The reader behind the serving listener. Redis being down at start is no reason to stop:
/// reads answer 503 until it is back, and connect again by themselves.
fn online_reads(service: &ServiceConfig, views: Vec<FeatureView>, metrics: &Arc<Metrics>) -> Reads {
    let cache = NonZeroUsize::new(service.serving.cache_entities)
        .map(|entities| ReadCache::new(entities, metrics));
    match FeatureReader::new(&service.redis, views, cache) {
        Ok(reader) => Reads::Ready(Arc::new(reader)),
        Err(e) => {
            tracing::warn!(error = %e, "online reads disabled: the Redis client cannot be set up");
            Reads::Unavailable(format!("the Redis client cannot be set up: {e}"))
        }
    }
}

/// The signals that stop `run`, registered as soon as it starts so that none is missed.
struct ShutdownSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Cancels `cancel` at the first SIGTERM or SIGINT.
    async fn wait(mut self, cancel: CancellationToken) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = self.int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        cancel.cancel();
    }
}
