//! Which entities an audit looks at: all of them, the ones a caller names, or a sample of
//! a given size chosen by key hash (the entities with the smallest hashes), so that
//! repeated runs follow the same keys while the population stays the same. The hash is the
//! feature log's ([`crate::record::entity_hash`]): a log that keeps a share `r` of entities
//! holds the audit's sample of the smallest hashes whenever the sample is at most `r` of them.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::classify::EntityKey;

/// How entities are chosen.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Every entity of both stores.
    All,
    /// This many entities, those with the smallest key hashes.
    Sample(usize),
    /// The entities named.
    Named(HashSet<EntityKey>),
}

/// Keeps the chosen entities while candidates stream in from both stores. Readers ask
/// the [`SampleFilter`] (cheap, shared) before doing work for a row; the one merging their
/// results calls [`Sampler::offer`], which may evict an entity chosen earlier.
#[derive(Debug)]
pub struct Sampler {
    filter: Arc<SampleFilter>,
    kept: BTreeSet<(u64, EntityKey)>,
}

/// The readers' side of a [`Sampler`]: whether a row's entity may be in the sample.
#[derive(Debug)]
pub struct SampleFilter {
    selection: Selection,
    /// For a sample: the largest hash still admitted (only ever falls).
    threshold: AtomicU64,
}

impl SampleFilter {
    /// Whether every entity is admitted (no filter to apply).
    pub fn admits_all(&self) -> bool {
        matches!(self.selection, Selection::All)
    }

    /// Whether an entity with this hash may be in the sample; `None` when that depends on
    /// its key (named entities).
    pub fn admits_hash(&self, hash: u64) -> Option<bool> {
        match &self.selection {
            Selection::All => Some(true),
            Selection::Sample(_) => Some(hash <= self.threshold.load(Ordering::Relaxed)),
            Selection::Named(_) => None,
        }
    }

    /// Whether an entity with this key and hash may be in the sample.
    pub fn admits(&self, key: &EntityKey, hash: u64) -> bool {
        match &self.selection {
            Selection::Named(names) => names.contains(key),
            _ => self.admits_hash(hash).unwrap_or(false),
        }
    }
}

/// What [`Sampler::offer`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Offered {
    /// The entity is (or already was) in the sample.
    Kept,
    /// Kept, and this entity chosen before leaves the sample.
    KeptEvicting(EntityKey),
    /// Not in the sample.
    Refused,
}

impl Sampler {
    /// A sampler for `selection`.
    pub fn new(selection: Selection) -> Self {
        Self {
            filter: Arc::new(SampleFilter {
                selection,
                threshold: AtomicU64::new(u64::MAX),
            }),
            kept: BTreeSet::new(),
        }
    }

    /// The entities named, when the selection names them.
    pub fn named(&self) -> Option<&HashSet<EntityKey>> {
        match &self.filter.selection {
            Selection::Named(names) => Some(names),
            _ => None,
        }
    }

    /// How the selection reads in a report.
    pub fn describe(&self) -> &'static str {
        match &self.filter.selection {
            Selection::All => "all",
            Selection::Sample(_) => "sample by key hash",
            Selection::Named(_) => "named",
        }
    }

    /// Takes `key` out of the sample (its place may go to another entity whose hash is at
    /// most the current threshold).
    pub fn forget(&mut self, key: &EntityKey, hash: u64) {
        self.kept.remove(&(hash, key.clone()));
    }

    /// The readers' filter.
    pub fn filter(&self) -> Arc<SampleFilter> {
        self.filter.clone()
    }

    /// Whether an entity with this key and hash may be in the sample.
    pub fn admits(&self, key: &EntityKey, hash: u64) -> bool {
        self.filter.admits(key, hash)
    }

    /// Takes a candidate seen in a store.
    pub fn offer(&mut self, key: &EntityKey, hash: u64) -> Offered {
        if !self.admits(key, hash) {
            return Offered::Refused;
        }
        let Selection::Sample(size) = self.filter.selection else {
            return Offered::Kept;
        };
        if size == 0 {
            return Offered::Refused;
        }
        let entry = (hash, key.clone());
        if self.kept.contains(&entry) {
            return Offered::Kept;
        }
        self.kept.insert(entry);
        if self.kept.len() <= size {
            return Offered::Kept;
        }
        let evicted = self.kept.pop_last();
        if let Some((largest, _)) = self.kept.last() {
            self.filter.threshold.store(*largest, Ordering::Relaxed);
        }
        match evicted {
            Some((_, evicted)) if evicted == *key => Offered::Refused,
            Some((_, evicted)) => Offered::KeptEvicting(evicted),
            None => Offered::Kept,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::entity_hash;

    fn key(n: u32) -> EntityKey {
        vec![n.to_string()]
    }

    #[test]
    fn a_sample_keeps_the_smallest_hashes_whatever_the_order() {
        let run = |order: Vec<u32>| {
            let mut sampler = Sampler::new(Selection::Sample(10));
            let mut kept = HashSet::new();
            for n in order {
                let k = key(n);
                match sampler.offer(&k, entity_hash(&k)) {
                    Offered::Kept => {
                        kept.insert(k);
                    }
                    Offered::KeptEvicting(out) => {
                        kept.remove(&out);
                        kept.insert(k);
                    }
                    Offered::Refused => {}
                }
            }
            kept
        };
        let forward = run((0..1000).collect());
        let backward = run((0..1000).rev().collect());
        assert_eq!(forward.len(), 10);
        assert_eq!(forward, backward);
        let mut hashes: Vec<u64> = (0..1000).map(|n| entity_hash(&key(n))).collect();
        hashes.sort_unstable();
        assert!(forward.iter().all(|k| entity_hash(k) <= hashes[9]));
    }

    #[test]
    fn named_entities_and_all() {
        let named = Sampler::new(Selection::Named([key(1)].into_iter().collect()));
        assert!(named.admits(&key(1), 0) && !named.admits(&key(2), 0));
        let mut all = Sampler::new(Selection::All);
        assert_eq!(all.offer(&key(7), u64::MAX), Offered::Kept);
        assert_ne!(entity_hash(&key(1)), entity_hash(&key(2)));
        assert_ne!(
            entity_hash(&["a".into(), "b".into()]),
            entity_hash(&["ab".into()])
        );
    }
}
