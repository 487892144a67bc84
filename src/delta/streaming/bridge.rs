//! Gaps the source made: entry ids its consumers never see (Pulsar's transaction and
//! replicated-subscription markers, aborted transactional messages, messages expired by a
//! TTL). They never fill, so waiting [`super::GAP_GRACE`] for them only delays commits. The
//! source says which gaps it skipped itself ([`SkippedEntries`]); such a gap is "bridged":
//! the rollover treats the messages on both sides as one unbroken run. A gap left by another
//! writer's messages (a Failover hand-over) is not skipped by the source and still fences.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::gaps::AcceptedGap;
use crate::delta::table::positions::continues_key;
use crate::delta::{CommittedPositions, MessageKey};
use crate::source::{between_entries, SkippedEntries};

/// How long a "not skipped" answer stands before the same gap is asked about again.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// The gaps known to be skipped by the source, and the source to ask about new ones.
#[derive(Default)]
pub struct GapBridge {
    probe: Option<Arc<dyn SkippedEntries>>,
    bridged: HashSet<AcceptedGap>,
    /// Gaps the source did not vouch for, and when it was asked.
    refused: HashMap<AcceptedGap, Instant>,
    /// Per partition, messages this sink let go without a commit (a rollover without rows,
    /// e.g. only copies another region commits): what the table held then, and the commit key
    /// of the last one. The next commit continues from there, not from the table's position.
    released: HashMap<String, (Option<MessageKey>, MessageKey)>,
}

impl std::fmt::Debug for GapBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GapBridge")
            .field("probe", &self.probe.is_some())
            .field("bridged", &self.bridged)
            .field("refused", &self.refused.len())
            .finish()
    }
}

impl GapBridge {
    /// Asks `probe` from now on.
    pub fn set_probe(&mut self, probe: Arc<dyn SkippedEntries>) {
        self.probe = Some(probe);
    }

    /// The gaps the source skipped.
    pub fn bridged(&self) -> &HashSet<AcceptedGap> {
        &self.bridged
    }

    /// Records that the messages up to `keys` (per partition) were let go without a commit
    /// while the table held `held`.
    pub fn released_without_commit(
        &mut self,
        held: &CommittedPositions,
        keys: BTreeMap<String, MessageKey>,
    ) {
        for (partition, key) in keys {
            let table = held.get(&partition);
            if table.is_some_and(|t| key <= t) {
                continue;
            }
            match self.released.get_mut(&partition) {
                Some((since, through)) if *since == table => *through = (*through).max(key),
                _ => {
                    self.released.insert(partition, (table, key));
                }
            }
        }
    }

    /// Whether `gap` is only messages this sink let go without a commit.
    fn released_gap(&self, gap: &AcceptedGap) -> bool {
        self.released
            .get(&gap.0)
            .is_some_and(|(since, through)| *since == Some(gap.1) && continues_key(*through, gap.2))
    }

    /// Learns which of `gaps` (the rollover's, see [`super::rollover::Rollover::gaps`]) the
    /// source skipped: each gap is asked about once when skipped, at most every
    /// [`ASK_AGAIN_AFTER`] while not, in one request per partition. Without a probe, or when
    /// it fails, nothing is bridged (the gap grace applies).
    pub async fn learn(&mut self, gaps: &[AcceptedGap]) {
        let current: HashSet<&AcceptedGap> = gaps.iter().collect();
        self.bridged.retain(|gap| current.contains(gap));
        self.refused.retain(|gap, _| current.contains(gap));
        for gap in gaps {
            if !self.bridged.contains(gap) && self.released_gap(gap) {
                tracing::debug!(partition = %gap.0, held = ?gap.1, next = ?gap.2, "the messages between were let go without rows; committing past them");
                self.bridged.insert(gap.clone());
            }
        }
        let Some(probe) = self.probe.clone() else {
            return;
        };
        let mut ask: Vec<(&str, Vec<&AcceptedGap>)> = Vec::new();
        for gap in gaps {
            let fresh_no = self
                .refused
                .get(gap)
                .is_some_and(|asked| asked.elapsed() < ASK_AGAIN_AFTER);
            if self.bridged.contains(gap) || fresh_no || !between_entries(gap.1, gap.2) {
                continue;
            }
            match ask.iter_mut().find(|(partition, _)| *partition == gap.0) {
                Some((_, list)) => list.push(gap),
                None => ask.push((gap.0.as_str(), vec![gap])),
            }
        }
        for (partition, list) in ask {
            let offsets: Vec<_> = list.iter().map(|gap| (gap.1, gap.2)).collect();
            match probe.skipped(partition, &offsets).await {
                Ok(answers) => {
                    for (gap, skipped) in list.into_iter().zip(answers) {
                        if skipped {
                            tracing::debug!(partition = %gap.0, held = ?gap.1, next = ?gap.2, "the broker skipped the entries between (markers, aborted or expired messages); committing past them");
                            self.bridged.insert(gap.clone());
                        } else {
                            self.refused.insert(gap.clone(), Instant::now());
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot tell whether the source skipped a gap; it waits for the gap grace");
                    for gap in list {
                        self.refused.insert(gap.clone(), Instant::now());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::WHOLE_ENTRY;
    use crate::source::{Offset, SkippedEntriesError};
    use async_trait::async_trait;
    use std::sync::Mutex;

    /// Says a gap is skipped when its entries are all in `skipped`; counts requests.
    struct Entries {
        skipped: Vec<u64>,
        asked: Mutex<usize>,
    }

    #[async_trait]
    impl SkippedEntries for Entries {
        async fn skipped(
            &self,
            _stream: &str,
            gaps: &[(Offset, Offset)],
        ) -> Result<Vec<bool>, SkippedEntriesError> {
            *self.asked.lock().unwrap() += 1;
            Ok(gaps
                .iter()
                .map(|(a, b)| (a.1 + 1..b.1).all(|e| self.skipped.contains(&e)))
                .collect())
        }

        async fn done_before(&self, _: &str, first: Offset) -> Result<bool, SkippedEntriesError> {
            Ok((0..first.1).all(|e| self.skipped.contains(&e)))
        }
    }

    fn gap(at: u64, next: u64) -> AcceptedGap {
        ("p".into(), (7, at, WHOLE_ENTRY), (7, next, -1))
    }

    #[tokio::test]
    async fn skipped_gaps_are_bridged_and_asked_about_once() {
        let probe = Arc::new(Entries {
            skipped: vec![5, 6, 9],
            asked: Mutex::new(0),
        });
        let mut bridge = GapBridge::default();
        bridge.learn(&[gap(4, 7)]).await;
        assert!(bridge.bridged().is_empty(), "no probe: nothing bridged");
        bridge.set_probe(probe.clone());
        let gaps = [gap(4, 7), gap(8, 10), gap(11, 13)];
        bridge.learn(&gaps).await;
        assert_eq!(*probe.asked.lock().unwrap(), 1, "one request per partition");
        assert!(bridge.bridged().contains(&gap(4, 7)));
        assert!(bridge.bridged().contains(&gap(8, 10)));
        assert!(
            !bridge.bridged().contains(&gap(11, 13)),
            "12 was not skipped"
        );
        bridge.learn(&gaps).await;
        assert_eq!(
            *probe.asked.lock().unwrap(),
            1,
            "a yes is kept, a fresh no not asked again"
        );
        // A gap inside an entry (the rest of entry 11 missing) is never asked about.
        bridge.learn(&[("p".into(), (7, 11, 2), (7, 13, 0))]).await;
        assert_eq!(*probe.asked.lock().unwrap(), 1);
        assert!(
            bridge.bridged().is_empty(),
            "gaps no longer there are forgotten"
        );
    }

    #[tokio::test]
    async fn messages_let_go_without_rows_bridge_the_gap_they_leave() {
        let mut bridge = GapBridge::default();
        let mut held = CommittedPositions::default();
        held.set("p", Some((7, 3, WHOLE_ENTRY)));
        // Entries 4..=8 and the first two messages of entry 9 went without a commit.
        bridge.released_without_commit(
            &held,
            BTreeMap::from([("p".to_string(), (7, 8, WHOLE_ENTRY))]),
        );
        bridge.released_without_commit(&held, BTreeMap::from([("p".to_string(), (7, 9, 1))]));
        let after_release = ("p".to_string(), (7, 3, WHOLE_ENTRY), (7, 9, 2));
        let further = ("p".to_string(), (7, 3, WHOLE_ENTRY), (7, 9, 3));
        bridge
            .learn(&[after_release.clone(), further.clone()])
            .await;
        assert!(bridge.bridged().contains(&after_release));
        assert!(!bridge.bridged().contains(&further), "9:2 is missing");
        // Once the table moved, what was let go before no longer bridges anything.
        held.set("p", Some((7, 20, WHOLE_ENTRY)));
        bridge.released_without_commit(
            &held,
            BTreeMap::from([("p".to_string(), (7, 21, WHOLE_ENTRY))]),
        );
        let old = ("p".to_string(), (7, 3, WHOLE_ENTRY), (7, 9, 2));
        let mut fresh = GapBridge {
            released: bridge.released.clone(),
            ..GapBridge::default()
        };
        fresh.learn(std::slice::from_ref(&old)).await;
        assert!(!fresh.bridged().contains(&old));
    }
}
