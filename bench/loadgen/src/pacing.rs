//! Open-loop pacing for `produce --rate` / `--rate-schedule`: events are sent at the
//! scheduled rate whether or not the consumer keeps up (as real traffic does), so the
//! measured latency includes any queueing the system under test causes.

use std::time::Duration;

use tokio::time::Instant;

/// One phase of a schedule: `rate` events per second for `duration`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// Events per second.
    pub rate: f64,
    /// How long.
    pub duration: Duration,
}

/// Parses `20000:20s,200000:10s` (rate:duration, humantime durations).
pub fn parse_schedule(text: &str) -> Result<Vec<Phase>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|phase| {
            let (rate, duration) = phase
                .split_once(':')
                .ok_or_else(|| format!("`{phase}`: write rate:duration, e.g. 20000:20s"))?;
            let rate: f64 = rate
                .trim()
                .parse()
                .map_err(|_| format!("`{rate}` is not a rate in events/s"))?;
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(format!("`{phase}`: the rate must be above 0"));
            }
            let duration = humantime::parse_duration(duration.trim())
                .map_err(|e| format!("`{duration}`: {e}"))?;
            Ok(Phase { rate, duration })
        })
        .collect()
}

/// Events a schedule sends in all.
pub fn schedule_events(phases: &[Phase]) -> u64 {
    phases
        .iter()
        .map(|p| (p.rate * p.duration.as_secs_f64()).round() as u64)
        .sum()
}

/// When each event is due.
pub struct Pacer {
    /// (first event index of the phase, its start offset, its rate)
    phases: Vec<(u64, Duration, f64)>,
    started: Instant,
}

impl Pacer {
    /// The same pacer, starting now.
    pub fn restarted(self) -> Self {
        Self {
            started: Instant::now(),
            ..self
        }
    }

    /// A pacer starting now.
    pub fn new(phases: &[Phase]) -> Self {
        let mut first = 0;
        let mut offset = Duration::ZERO;
        let mut table = Vec::with_capacity(phases.len());
        for phase in phases {
            table.push((first, offset, phase.rate));
            first += (phase.rate * phase.duration.as_secs_f64()).round() as u64;
            offset += phase.duration;
        }
        Self {
            phases: table,
            started: Instant::now(),
        }
    }

    /// The phase (0-based) the `n`-th event belongs to.
    pub fn phase_of(&self, n: u64) -> usize {
        self.phases
            .iter()
            .rposition(|(first, _, _)| *first <= n)
            .unwrap_or(0)
    }

    /// Number of phases.
    pub fn phases(&self) -> usize {
        self.phases.len()
    }

    /// When the `n`-th event (0-based) is due.
    pub fn due(&self, n: u64) -> Instant {
        let (first, offset, rate) = self
            .phases
            .iter()
            .rev()
            .find(|(first, _, _)| *first <= n)
            .copied()
            .unwrap_or((0, Duration::ZERO, f64::INFINITY));
        self.started + offset + Duration::from_secs_f64((n - first) as f64 / rate)
    }

    /// Waits until the `n`-th event is due (returns at once when behind schedule).
    pub async fn wait(&self, n: u64) {
        let due = self.due(n);
        // Sleeping for less than a millisecond costs more than it paces.
        if due > Instant::now() + Duration::from_millis(1) {
            tokio::time::sleep_until(due).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_pace() {
        let phases = parse_schedule("1000:2s, 10000:1s").unwrap();
        assert_eq!(schedule_events(&phases), 12_000);
        let pacer = Pacer::new(&phases);
        let at = |n| pacer.due(n) - pacer.started;
        assert_eq!(at(0), Duration::ZERO);
        assert_eq!(at(1000), Duration::from_secs(1));
        assert_eq!(at(2000), Duration::from_secs(2));
        assert_eq!(at(7000), Duration::from_millis(2500));
        assert_eq!((pacer.phase_of(1999), pacer.phase_of(2000)), (0, 1));
        assert!(parse_schedule("fast:1s").is_err());
        assert!(parse_schedule("100").is_err());
        assert!(parse_schedule("0:1s").is_err());
    }
}
