//! Readiness: `/readyz` answers 200 only when every lane is subscribed and every service a
//! pipeline writes to answers now. Each sink brings its own [`Probe`] (Redis `PING`, an
//! object-store listing); this module only runs them.
//!
//! Progress: each lane reports what it received and acknowledged ([`LaneProgress`]), so that
//! a lane whose sink keeps failing (Redis refusing writes, the object store down) shows as
//! degraded in `/readyz` and in `ack_wait_seconds`, even while every probe answers. A stalled
//! lane does not make the process unready: the model service beside it still reads the
//! features already stored (docs/operations.md, readiness).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{LaneLabels, Metrics, PipelineLabels};

/// One dependency `/readyz` checks.
#[async_trait]
pub trait Probe: Send + Sync {
    /// What is checked, for the response body (never a URL with credentials).
    fn name(&self) -> String;
    /// `Err` with the reason when the dependency does not answer.
    async fn check(&self) -> Result<(), String>;
}

/// How long one probe may take before it counts as down.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Lanes running against lanes expected, the dependencies to probe and each lane's progress.
pub struct Health {
    lanes_running: AtomicUsize,
    lanes_expected: AtomicUsize,
    probes: RwLock<Vec<Arc<dyn Probe>>>,
    progress: RwLock<Vec<Arc<LaneProgress>>>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            lanes_running: AtomicUsize::new(0),
            lanes_expected: AtomicUsize::new(usize::MAX),
            probes: RwLock::new(Vec::new()),
            progress: RwLock::new(Vec::new()),
        }
    }
}

/// One lane's messages waiting for acknowledgement and when it last made progress.
pub struct LaneProgress {
    labels: LaneLabels,
    /// Messages received and not acknowledged: the lane's `messages_in_flight` gauge.
    in_flight: Gauge,
    /// The lane stopped: nothing of it waits any more.
    stopped: AtomicBool,
    /// Epoch ms of the last acknowledgement, or of the first message received after the lane
    /// had none waiting.
    progress_ms: AtomicI64,
    /// How long the lane may normally wait for its sinks (its longest hold, e.g. a rollover
    /// interval, and some slack); longer is a stall.
    patience: Duration,
    /// Newest event time (epoch ms) among the rows the lane decoded; [`NO_EVENT`] before
    /// the first.
    newest_event_ms: AtomicI64,
}

/// [`LaneProgress::newest_event_ms`] before the lane decoded any row.
const NO_EVENT: i64 = i64::MIN;

impl LaneProgress {
    /// `count` messages were received.
    pub fn received(&self, count: u64) {
        if self
            .in_flight
            .inc_by(i64::try_from(count).unwrap_or(i64::MAX))
            <= 0
        {
            self.progress_ms.store(now_ms(), Ordering::SeqCst);
        }
    }

    /// `count` messages were acknowledged.
    pub fn acknowledged(&self, count: u64) {
        self.in_flight
            .dec_by(i64::try_from(count).unwrap_or(i64::MAX));
        self.progress_ms.store(now_ms(), Ordering::SeqCst);
    }

    /// The lane decoded rows whose newest event time is `newest_ms` (epoch ms): one call
    /// per batch, for `newest_event_age_seconds`.
    pub fn decoded_events_up_to(&self, newest_ms: i64) {
        self.newest_event_ms.fetch_max(newest_ms, Ordering::Relaxed);
    }

    /// Newest event time the lane decoded (epoch ms), if any.
    fn newest_event(&self) -> Option<i64> {
        Some(self.newest_event_ms.load(Ordering::Relaxed)).filter(|&ms| ms != NO_EVENT)
    }

    /// The lane stopped: nothing of it waits any more.
    pub fn stopped(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Messages waiting for acknowledgement; none once the lane stopped.
    fn waiting(&self) -> i64 {
        if self.stopped.load(Ordering::SeqCst) {
            return 0;
        }
        self.in_flight.get()
    }

    /// How long messages have waited without any acknowledgement, as of `now_ms`; zero
    /// when none wait.
    pub fn waited(&self, now_ms: i64) -> Duration {
        if self.waiting() <= 0 {
            return Duration::ZERO;
        }
        let since = self.progress_ms.load(Ordering::SeqCst);
        Duration::from_millis(u64::try_from(now_ms.saturating_sub(since)).unwrap_or(0))
    }

    /// Why the lane counts as stalled as of `now_ms`, if it does.
    fn stall(&self, now_ms: i64) -> Option<String> {
        let waited = self.waited(now_ms);
        (waited > self.patience).then(|| {
            format!(
                "lane {}/{}: no acknowledgement for {} s while {} messages wait (normal: within {} s); its sink is retrying, see the log",
                self.labels.pipeline,
                self.labels.sink,
                waited.as_secs(),
                self.waiting(),
                self.patience.as_secs()
            )
        })
    }
}

/// Per pipeline, the newest event time any of its lanes decoded (epoch ms); pipelines
/// without one yet are left out.
fn newest_events(lanes: &[Arc<LaneProgress>]) -> BTreeMap<String, i64> {
    let mut newest = BTreeMap::new();
    for lane in lanes {
        if let Some(ms) = lane.newest_event() {
            newest
                .entry(lane.labels.pipeline.clone())
                .and_modify(|known: &mut i64| *known = (*known).max(ms))
                .or_insert(ms);
        }
    }
    newest
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Health {
    /// How many lanes the runtime is about to start.
    pub fn expect_lanes(&self, count: usize) {
        self.lanes_expected.store(count, Ordering::SeqCst);
    }

    /// A lane is subscribed and consuming.
    pub fn lane_started(&self) {
        self.lanes_running.fetch_add(1, Ordering::SeqCst);
    }

    /// A lane stopped.
    pub fn lane_stopped(&self) {
        self.lanes_running.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether every lane is subscribed and running.
    pub fn lanes_ready(&self) -> bool {
        self.lanes_running.load(Ordering::SeqCst) >= self.lanes_expected.load(Ordering::SeqCst)
    }

    /// Adds a dependency to check on every `/readyz`; a second probe of the same name
    /// (pipelines sharing one Redis) is not added.
    pub fn add_probe(&self, probe: Arc<dyn Probe>) {
        if let Ok(mut probes) = self.probes.write() {
            if probes.iter().all(|known| known.name() != probe.name()) {
                probes.push(probe);
            }
        }
    }

    /// Tracks the progress of lane `sink` of `pipeline`, which may wait up to `patience` for
    /// its sinks before it counts as stalled; its waiting messages are counted in `metrics`'
    /// `messages_in_flight`.
    pub fn track_lane(
        &self,
        pipeline: &str,
        sink: &str,
        patience: Duration,
        metrics: &Metrics,
    ) -> Arc<LaneProgress> {
        let labels = LaneLabels {
            pipeline: pipeline.to_string(),
            sink: sink.to_string(),
        };
        let progress = Arc::new(LaneProgress {
            in_flight: metrics.messages_in_flight.get_or_create(&labels).clone(),
            labels,
            stopped: AtomicBool::new(false),
            progress_ms: AtomicI64::new(now_ms()),
            patience,
            newest_event_ms: AtomicI64::new(NO_EVENT),
        });
        if let Ok(mut lanes) = self.progress.write() {
            // A lane started again keeps the newest event its predecessor saw.
            for earlier in lanes.iter().filter(|lane| lane.labels == progress.labels) {
                if let Some(newest) = earlier.newest_event() {
                    progress.decoded_events_up_to(newest);
                }
            }
            lanes.retain(|lane| lane.labels != progress.labels);
            lanes.push(Arc::clone(&progress));
        }
        progress
    }

    fn lanes(&self) -> Vec<Arc<LaneProgress>> {
        self.progress
            .read()
            .map(|lanes| lanes.clone())
            .unwrap_or_default()
    }

    /// Lanes that waited for their sinks longer than normal: degraded, not unready.
    pub fn degraded(&self) -> Vec<String> {
        let now = now_ms();
        self.lanes()
            .iter()
            .filter_map(|lane| lane.stall(now))
            .collect()
    }

    /// Sets `ack_wait_seconds` and `ack_wait_limit_seconds` of every lane and
    /// `newest_event_age_seconds` of every pipeline (at each scrape).
    pub fn record(&self, metrics: &Metrics) {
        let now = now_ms();
        let lanes = self.lanes();
        for (pipeline, newest) in newest_events(&lanes) {
            metrics
                .consistency
                .newest_event_age_seconds
                .get_or_create(&PipelineLabels { pipeline })
                .set(now.saturating_sub(newest).max(0) as f64 / 1000.0);
        }
        for lane in lanes {
            metrics
                .ack_wait_seconds
                .get_or_create(&lane.labels)
                .set(lane.waited(now).as_secs_f64());
            metrics
                .ack_wait_limit_seconds
                .get_or_create(&lane.labels)
                .set(lane.patience.as_secs_f64());
        }
    }

    /// Every problem found now; empty when ready.
    pub async fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.lanes_ready() {
            problems.push("lanes: not every lane is subscribed yet".to_string());
        }
        let probes: Vec<Arc<dyn Probe>> = self
            .probes
            .read()
            .map(|probes| probes.clone())
            .unwrap_or_default();
        let checks = probes.iter().map(|probe| async move {
            match tokio::time::timeout(PROBE_TIMEOUT, probe.check()).await {
                Ok(Ok(())) => None,
                Ok(Err(reason)) => Some(format!("{}: {reason}", probe.name())),
                Err(_) => Some(format!(
                    "{}: no answer within {PROBE_TIMEOUT:?}",
                    probe.name()
                )),
            }
        });
        problems.extend(
            futures::future::join_all(checks)
                .await
                .into_iter()
                .flatten(),
        );
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Down;

    #[async_trait]
    impl Probe for Down {
        fn name(&self) -> String {
            "store".into()
        }
        async fn check(&self) -> Result<(), String> {
            Err("refused".into())
        }
    }

    #[tokio::test]
    async fn ready_only_when_every_lane_runs_and_every_probe_answers() {
        let health = Health::default();
        assert!(!health.lanes_ready(), "no lane count announced yet");
        health.expect_lanes(1);
        assert!(!health.lanes_ready());
        health.lane_started();
        assert!(health.problems().await.is_empty());
        health.add_probe(Arc::new(Down));
        assert_eq!(health.problems().await, vec!["store: refused".to_string()]);
        health.lane_stopped();
        assert_eq!(health.problems().await.len(), 2);
    }

    #[test]
    fn a_lane_waiting_longer_than_its_patience_is_degraded_until_it_acknowledges() {
        let health = Health::default();
        let metrics = Metrics::new();
        let lane = health.track_lane("p", "online", Duration::from_secs(30), &metrics);
        assert!(health.degraded().is_empty());
        lane.received(10);
        let start = lane.progress_ms.load(Ordering::SeqCst);
        assert_eq!(lane.waited(start + 20_000), Duration::from_secs(20));
        assert!(lane.stall(start + 20_000).is_none(), "within its patience");
        let stall = lane.stall(start + 45_000).expect("stalled");
        assert!(
            stall.contains("lane p/online: no acknowledgement for 45 s while 10 messages wait"),
            "{stall}"
        );
        lane.progress_ms.store(start - 60_000, Ordering::SeqCst);
        assert_eq!(health.degraded().len(), 1);
        health.record(&metrics);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"feature_connector_ack_wait_limit_seconds{pipeline="p",sink="online"} 30.0"#
            ),
            "{text}"
        );
        lane.acknowledged(10);
        assert!(health.degraded().is_empty());
        assert_eq!(
            lane.waited(now_ms() + 60_000),
            Duration::ZERO,
            "nothing waits"
        );
        lane.received(5);
        lane.acknowledged(2);
        assert_eq!(lane.waiting(), 3);
        assert!(
            metrics
                .encode()
                .contains(r#"feature_connector_messages_in_flight{pipeline="p",sink="online"} 3"#),
            "the lane's waiting messages are its in-flight gauge"
        );
        lane.stopped();
        assert_eq!(lane.waited(now_ms() + 60_000), Duration::ZERO);
    }

    #[test]
    fn newest_event_age_is_the_pipelines_newest_event_across_its_lanes_at_scrape() {
        let health = Health::default();
        let metrics = Metrics::new();
        let patience = Duration::from_secs(30);
        let online = health.track_lane("p", "online", patience, &metrics);
        let offline = health.track_lane("p", "offline", patience, &metrics);
        let _idle = health.track_lane("idle", "online", patience, &metrics);
        let now = now_ms();
        online.decoded_events_up_to(now - 90_000);
        offline.decoded_events_up_to(now - 30_000);
        offline.decoded_events_up_to(now - 60_000);
        health.record(&metrics);
        let age = |text: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with(r#"feature_connector_newest_event_age_seconds{pipeline="p"}"#)
                })
                .unwrap_or_else(|| panic!("no age in {text}"));
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap()
        };
        let text = metrics.encode();
        assert!((30.0..35.0).contains(&age(&text)), "{text}");
        assert!(
            !text.contains(r#"newest_event_age_seconds{pipeline="idle"}"#),
            "{text}"
        );
        // Started again, the lane keeps what it had seen; events in the future are age 0.
        let again = health.track_lane("p", "offline", patience, &metrics);
        assert_eq!(again.newest_event(), Some(now - 30_000));
        again.decoded_events_up_to(now + 60_000);
        health.record(&metrics);
        assert_eq!(age(&metrics.encode()), 0.0);
    }
}
