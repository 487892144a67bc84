//! Retrying a down service: exponential backoff with jitter, and a wait that shutdown
//! interrupts. Every retry loop of the process goes through [`Backoff::wait`].

use std::fmt::Display;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Shutdown was requested while waiting to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shutdown while waiting to retry")]
pub struct Cancelled;

/// Delays of 100 ms doubling up to 5 s, each with up to 25 % jitter so that replicas do not
/// retry in lock-step.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(5))
    }
}

impl Backoff {
    /// Starts at `initial`, never waits longer than `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            next: initial,
            max,
            attempts: 0,
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        self.attempts += 1;
        let jitter_ms = u64::try_from(base.as_millis() / 4).unwrap_or(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::from(d.subsec_nanos()))
            .unwrap_or(0);
        base + Duration::from_millis(if jitter_ms == 0 { 0 } else { nanos % jitter_ms })
    }

    /// Logs that `what` failed with `error` (a warning: the operator should know a service is
    /// down), then waits the next delay. `Err(Cancelled)` as soon as `cancel` fires.
    pub async fn wait(
        &mut self,
        cancel: &CancellationToken,
        what: &str,
        error: &(dyn Display + Sync),
    ) -> Result<(), Cancelled> {
        let delay = self.next_delay();
        tracing::warn!(error = %error, retry_in = ?delay, attempt = self.attempts, "{what}, retrying");
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(Cancelled),
            () = tokio::time::sleep(delay) => Ok(()),
        }
    }

    /// Attempts made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let delays: Vec<Duration> = (0..4).map(|_| backoff.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(100) && delays[0] < Duration::from_millis(126));
        assert!(delays[1] >= Duration::from_millis(200) && delays[1] < Duration::from_millis(251));
        assert!(delays[3] >= Duration::from_millis(400) && delays[3] < Duration::from_millis(501));
        assert_eq!(backoff.attempts(), 4);
    }

    #[tokio::test]
    async fn wait_ends_when_cancelled() {
        let cancel = CancellationToken::new();
        let mut backoff = Backoff::new(Duration::from_secs(60), Duration::from_secs(60));
        cancel.cancel();
        let waited = tokio::time::timeout(
            Duration::from_secs(1),
            backoff.wait(&cancel, "test", &"down"),
        )
        .await;
        assert_eq!(waited, Ok(Err(Cancelled)));
    }

    #[tokio::test]
    async fn wait_returns_after_the_delay() {
        let cancel = CancellationToken::new();
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(1));
        assert_eq!(backoff.wait(&cancel, "test", &"down").await, Ok(()));
        assert_eq!(backoff.attempts(), 1);
    }
}
