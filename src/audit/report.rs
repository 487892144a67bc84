//! An audit's findings: counts per outcome, per-feature mismatch ratios and numeric error,
//! the table's lag, a few examples of each outcome; as JSON or as text for a terminal.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::time::Instant;

use serde::Serialize;

use super::classify::{Comparison, EntityKey, Outcome};
/// Examples kept per outcome.
const EXAMPLES: usize = 5;

/// What was read of the table for an audit.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TableRead {
    /// The snapshot's version.
    pub version: u64,
    /// Data files read.
    pub files_read: usize,
    /// Data files skipped by their partition.
    pub files_skipped: usize,
    /// Rows read.
    pub rows_read: u64,
}

/// What an audit found.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// The pipeline (feature view) audited.
    pub pipeline: String,
    /// How entities were chosen: `all`, `sample` or `named`.
    pub selection: String,
    /// Entities compared.
    pub entities: usize,
    /// When the stores were read (epoch ms): the table first, then the online store.
    pub audited_at_ms: i64,
    /// The table version read.
    pub table_version: u64,
    /// Data files read, and skipped by their partition.
    pub files_read: usize,
    /// Data files skipped by their partition (before `--since`).
    pub files_skipped: usize,
    /// Rows read from the table.
    pub rows_read: u64,
    /// Online keys scanned for entities only online (`None` on a Redis Cluster: not scanned).
    pub online_keys_scanned: Option<u64>,
    /// Entities per outcome (every outcome listed).
    pub outcomes: BTreeMap<&'static str, usize>,
    /// Entities in a defect class.
    pub defects: usize,
    /// Per feature, compared at the same event time.
    pub features: Vec<FeatureReport>,
    /// How far the table is behind the online store, for the entities online ahead.
    pub lag: Option<LagReport>,
    /// Up to five entities per outcome other than `equal`.
    pub examples: BTreeMap<&'static str, Vec<Example>>,
    /// Seconds the audit took.
    pub seconds: f64,
}

/// One feature's figures.
#[derive(Debug, Clone, Serialize)]
pub struct FeatureReport {
    /// Feature name.
    pub feature: String,
    /// Entities whose online and offline values were compared (same event time).
    pub compared: usize,
    /// Of those, the ones whose values differ.
    pub mismatches: usize,
    /// `mismatches / compared` (0 when nothing was compared).
    pub mismatch_ratio: f64,
    /// Symmetric mean absolute percentage error over the numeric pairs (0 to 2); `None` for
    /// a feature that is not a number.
    pub smape: Option<f64>,
}

/// The table's lag behind the online store.
#[derive(Debug, Clone, Serialize)]
pub struct LagReport {
    /// Entities online ahead.
    pub entities: usize,
    /// Largest lag, seconds of event time.
    pub max_seconds: f64,
    /// Median lag.
    pub p50_seconds: f64,
    /// The newest event time online among them (epoch ms).
    pub newest_online_event_time_ms: i64,
    /// The oldest online event time among them (epoch ms): the table holds every event
    /// before it, for these entities.
    pub oldest_online_event_time_ms: i64,
}

/// One entity of an outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    /// Join key → value.
    pub entity: BTreeMap<String, String>,
    /// Event time online (epoch ms), when online.
    pub online_event_time_ms: Option<i64>,
    /// The table's newest event time (epoch ms), when in the table.
    pub offline_event_time_ms: Option<i64>,
    /// Features whose values differ (skew).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<String>,
}

/// What a report says besides its tally.
#[derive(Debug)]
pub struct ReportHead {
    /// The pipeline audited.
    pub pipeline: String,
    /// How entities were chosen.
    pub selection: &'static str,
    /// What was read of the table.
    pub read: TableRead,
    /// Online keys scanned (`None`: not scanned).
    pub online_keys_scanned: Option<u64>,
    /// When the stores were read (epoch ms).
    pub audited_at_ms: i64,
    /// When the audit began.
    pub started: Instant,
}

/// Gathers comparisons into a report.
#[derive(Debug)]
pub struct Tally {
    keys: Vec<String>,
    features: Vec<String>,
    counts: BTreeMap<Outcome, usize>,
    compared: Vec<usize>,
    mismatches: Vec<usize>,
    error_sums: Vec<f64>,
    error_counts: Vec<usize>,
    lags_ms: Vec<i64>,
    newest_ahead_ms: i64,
    oldest_ahead_ms: i64,
    examples: BTreeMap<&'static str, Vec<Example>>,
}

impl Tally {
    /// A tally for a view with these join keys and features.
    pub fn new(keys: Vec<String>, features: Vec<String>) -> Self {
        let n = features.len();
        Self {
            keys,
            features,
            counts: BTreeMap::new(),
            compared: vec![0; n],
            mismatches: vec![0; n],
            error_sums: vec![0.0; n],
            error_counts: vec![0; n],
            lags_ms: Vec::new(),
            newest_ahead_ms: i64::MIN,
            oldest_ahead_ms: i64::MAX,
            examples: BTreeMap::new(),
        }
    }

    /// Adds one entity's comparison.
    pub fn add(
        &mut self,
        entity: &EntityKey,
        comparison: &Comparison,
        online_ms: Option<i64>,
        offline_ms: Option<i64>,
    ) {
        *self.counts.entry(comparison.outcome).or_default() += 1;
        for (index, feature) in comparison.features.iter().enumerate() {
            if index >= self.compared.len() {
                break;
            }
            if !feature.compared {
                continue;
            }
            self.compared[index] += 1;
            if !feature.equal {
                self.mismatches[index] += 1;
            }
            if let Some(error) = feature.error {
                self.error_sums[index] += error;
                self.error_counts[index] += 1;
            }
        }
        if let Some(lag) = comparison.lag_ms {
            self.lags_ms.push(lag);
            self.newest_ahead_ms = self.newest_ahead_ms.max(online_ms.unwrap_or(i64::MIN));
            self.oldest_ahead_ms = self.oldest_ahead_ms.min(online_ms.unwrap_or(i64::MAX));
        }
        if comparison.outcome != Outcome::Equal {
            let examples = self.examples.entry(comparison.outcome.name()).or_default();
            if examples.len() < EXAMPLES {
                examples.push(Example {
                    entity: self
                        .keys
                        .iter()
                        .cloned()
                        .zip(entity.iter().cloned())
                        .collect(),
                    online_event_time_ms: online_ms,
                    offline_event_time_ms: offline_ms,
                    differing: comparison
                        .features
                        .iter()
                        .zip(&self.features)
                        .filter(|(f, _)| f.compared && !f.equal)
                        .map(|(_, name)| name.clone())
                        .collect(),
                });
            }
        }
    }

    /// Entities counted in `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.counts.get(&outcome).copied().unwrap_or(0)
    }

    /// Per-feature figures.
    pub fn features(&self) -> Vec<FeatureReport> {
        (0..self.features.len())
            .map(|i| FeatureReport {
                feature: self.features[i].clone(),
                compared: self.compared[i],
                mismatches: self.mismatches[i],
                mismatch_ratio: if self.compared[i] == 0 {
                    0.0
                } else {
                    self.mismatches[i] as f64 / self.compared[i] as f64
                },
                smape: (self.error_counts[i] > 0)
                    .then(|| self.error_sums[i] / self.error_counts[i] as f64),
            })
            .collect()
    }

    /// The lag figures, when some entity is online ahead.
    pub fn lag(&mut self) -> Option<LagReport> {
        if self.lags_ms.is_empty() {
            return None;
        }
        self.lags_ms.sort_unstable();
        let seconds = |ms: i64| ms as f64 / 1000.0;
        Some(LagReport {
            entities: self.lags_ms.len(),
            max_seconds: seconds(*self.lags_ms.last().unwrap_or(&0)),
            p50_seconds: seconds(self.lags_ms[self.lags_ms.len() / 2]),
            newest_online_event_time_ms: self.newest_ahead_ms,
            oldest_online_event_time_ms: self.oldest_ahead_ms,
        })
    }

    /// Entities per outcome, every outcome listed; and the defects among them.
    pub fn outcomes(&self) -> (BTreeMap<&'static str, usize>, usize) {
        let outcomes = Outcome::ALL
            .iter()
            .map(|o| (o.name(), self.count(*o)))
            .collect();
        let defects = Outcome::ALL
            .iter()
            .filter(|o| o.is_defect())
            .map(|o| self.count(*o))
            .sum();
        (outcomes, defects)
    }

    /// The report of the comparisons added, with `head`.
    pub fn into_report(mut self, head: ReportHead) -> AuditReport {
        let (outcomes, defects) = self.outcomes();
        AuditReport {
            pipeline: head.pipeline,
            selection: head.selection.to_string(),
            entities: self.counts.values().sum(),
            audited_at_ms: head.audited_at_ms,
            table_version: head.read.version,
            files_read: head.read.files_read,
            files_skipped: head.read.files_skipped,
            rows_read: head.read.rows_read,
            online_keys_scanned: head.online_keys_scanned,
            outcomes,
            defects,
            features: self.features(),
            lag: self.lag(),
            examples: std::mem::take(&mut self.examples),
            seconds: head.started.elapsed().as_secs_f64(),
        }
    }
}

impl AuditReport {
    /// The report as a terminal shows it.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "audit of `{}`: {} entities ({}), table version {}, {} files ({} rows) read, {:.2} s",
            self.pipeline,
            self.entities,
            self.selection,
            self.table_version,
            self.files_read,
            self.rows_read,
            self.seconds
        );
        for outcome in Outcome::ALL {
            let count = self.outcomes.get(outcome.name()).copied().unwrap_or(0);
            let note = match outcome {
                _ if outcome.is_defect() && count > 0 => "  DEFECT".to_string(),
                Outcome::OnlineAhead => self.lag.as_ref().map_or(String::new(), |lag| {
                    format!(
                        "  table lag: max {:.1} s, median {:.1} s",
                        lag.max_seconds, lag.p50_seconds
                    )
                }),
                _ => String::new(),
            };
            let _ = writeln!(out, "  {:<16}{count:>10}{note}", outcome.name());
        }
        if !self.features.is_empty() {
            let _ = writeln!(
                out,
                "  {:<24}{:>10}{:>12}{:>10}{:>10}",
                "feature", "compared", "mismatches", "ratio", "SMAPE"
            );
            for f in &self.features {
                let smape = f
                    .smape
                    .map_or("-".to_string(), |s| format!("{:.2}%", s * 100.0));
                let _ = writeln!(
                    out,
                    "  {:<24}{:>10}{:>12}{:>9.2}%{smape:>10}",
                    f.feature,
                    f.compared,
                    f.mismatches,
                    f.mismatch_ratio * 100.0
                );
            }
        }
        for (outcome, examples) in &self.examples {
            for example in examples {
                let entity: Vec<String> = example
                    .entity
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let _ = writeln!(
                    out,
                    "  {outcome}: {} online {} offline {}{}",
                    entity.join(","),
                    time_text(example.online_event_time_ms),
                    time_text(example.offline_event_time_ms),
                    if example.differing.is_empty() {
                        String::new()
                    } else {
                        format!(" differing: {}", example.differing.join(", "))
                    }
                );
            }
        }
        let _ = if self.defects == 0 {
            writeln!(out, "result: no defect")
        } else {
            writeln!(out, "result: {} entities in defect classes", self.defects)
        };
        out
    }
}

fn time_text(ms: Option<i64>) -> String {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map_or("-".to_string(), |t| {
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        })
}
