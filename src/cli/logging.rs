//! Logging: `tracing` to stderr, and the `log` records of crates that use `log` (pulsar-rs)
//! bridged into it, with one correction: pulsar-rs logs every first attempt to subscribe or
//! to create a producer as `WARN Retry #0 -> connecting …`, which reads like a fault on
//! every normal start. That first attempt is logged at debug; real retries (#1 on) stay
//! warnings.

use tracing::Subscriber;
use tracing_log::AsLog;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// The Delta kernel reports every error it returns at ERROR before returning it
/// (`#[instrument(err)]` on its listing, snapshot and replay functions): "No files in log
/// segment" for the table a sink creates on its first start, a listing cut short by shutdown.
/// The error comes back to the caller, which decides what it means and logs what an operator
/// must act on, so the kernel's own ERROR events are left out, whatever `RUST_LOG` says; its
/// warnings stay.
fn is_kernel_error_report(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.is_event()
        && *metadata.level() == tracing::Level::ERROR
        && metadata.target().starts_with("buoyant_kernel")
}

/// Logs to stderr, filtered by `RUST_LOG` (default: `info`, pulsar-rs and the Delta kernel
/// at `warn`: their info lines narrate each table read, which `audit` and a running audit
/// make often); JSON lines when `FC_LOG_FORMAT=json`.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,pulsar=warn,buoyant_kernel=warn")
    });
    let json = std::env::var("FC_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let installed =
        tracing::subscriber::set_global_default(subscriber(filter, std::io::stderr, json, ansi));
    // The builder's own `init` would install a plain `LogTracer`; ours goes in its place.
    if installed.is_ok() && log::set_boxed_logger(Box::new(QuietFirstAttempt::default())).is_ok() {
        log::set_max_level(tracing::level_filters::LevelFilter::current().as_log());
    }
}

/// The subscriber `init_logging` installs, writing to `writer`.
fn subscriber<W>(
    filter: tracing_subscriber::EnvFilter,
    writer: W,
    json: bool,
    ansi: bool,
) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer);
    let lines = if json {
        lines.json().boxed()
    } else {
        lines.boxed()
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::filter::filter_fn(|metadata| {
            !is_kernel_error_report(metadata)
        }))
        .with(lines)
}

/// The `log` → `tracing` bridge with pulsar-rs's first-attempt messages lowered to debug.
#[derive(Default)]
pub struct QuietFirstAttempt {
    inner: tracing_log::LogTracer,
}

/// The level a `log` record is passed on with.
pub fn level_of(record: &log::Record<'_>) -> log::Level {
    let first_attempt = record.level() == log::Level::Warn
        && record.target() == "pulsar::retry_op"
        && record.args().to_string().starts_with("Retry #0 ->");
    if first_attempt {
        log::Level::Debug
    } else {
        record.level()
    }
}

impl log::Log for QuietFirstAttempt {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        let level = level_of(record);
        if level == record.level() {
            return self.inner.log(record);
        }
        let lowered = log::Record::builder()
            .args(*record.args())
            .level(level)
            .target(record.target())
            .module_path(record.module_path())
            .file(record.file())
            .line(record.line())
            .build();
        if self.inner.enabled(lowered.metadata()) {
            self.inner.log(&lowered);
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use log::Log;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the bridge prints for pulsar-rs's messages under `filter`.
    fn printed(filter: &str) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = subscriber(
            tracing_subscriber::EnvFilter::new(filter),
            move || writer.clone(),
            false,
            false,
        );
        let bridge = QuietFirstAttempt::default();
        tracing::subscriber::with_default(subscriber, || {
            for attempt in [0, 1, 10] {
                bridge.log(
                    &log::Record::builder()
                        .args(format_args!(
                            "Retry #{attempt} -> connecting consumer 7 using connection a to broker b to topic t"
                        ))
                        .level(log::Level::Warn)
                        .target("pulsar::retry_op")
                        .build(),
                );
            }
            tracing::error!(target: "buoyant_kernel::log_segment_files", "listing cut short");
            tracing::warn!(target: "buoyant_kernel::crc::reader", "crc file unreadable");
            bridge.log(
                &log::Record::builder()
                    .args(format_args!("connection error, not retryable"))
                    .level(log::Level::Error)
                    .target("pulsar::connection")
                    .build(),
            );
        });
        let bytes = captured.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn first_attempts_are_debug_kernel_error_reports_left_out_warnings_kept() {
        let default = printed("info,pulsar=warn");
        assert!(!default.contains("Retry #0"), "{default}");
        assert!(
            default.contains("WARN pulsar::retry_op: Retry #1 ->"),
            "{default}"
        );
        assert!(
            default.contains("WARN pulsar::retry_op: Retry #10 ->"),
            "{default}"
        );
        assert!(default.contains("ERROR pulsar::connection"), "{default}");
        assert!(!default.contains("listing cut short"), "{default}");
        assert!(
            default.contains("WARN buoyant_kernel::crc::reader: crc file unreadable"),
            "{default}"
        );

        let debug = printed("debug");
        assert!(
            debug.contains("DEBUG pulsar::retry_op: Retry #0 ->"),
            "{debug}"
        );
        assert!(
            debug.contains("WARN pulsar::retry_op: Retry #1 ->"),
            "{debug}"
        );
    }
}
