//! Readiness: `/readyz` answers 200 only when every lane is subscribed and every service a
//! pipeline writes to answers now. Each sink brings its own [`Probe`] (Redis `PING`, an
//! object-store listing); this module only runs them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;

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

/// Lanes running against lanes expected, and the dependencies to probe.
pub struct Health {
    lanes_running: AtomicUsize,
    lanes_expected: AtomicUsize,
    probes: RwLock<Vec<Arc<dyn Probe>>>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            lanes_running: AtomicUsize::new(0),
            lanes_expected: AtomicUsize::new(usize::MAX),
            probes: RwLock::new(Vec::new()),
        }
    }
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
}
