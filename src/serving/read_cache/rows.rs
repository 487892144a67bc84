//! The read cache's rows: entities' Redis replies kept in memory (`serving.cache_entities`),
//! each dropped the moment Redis says its key changed.
//!
//! The reader's connection speaks RESP3 with `CLIENT TRACKING ON`: Redis remembers the keys
//! the connection read and pushes an invalidation on it when any client changes one (a
//! script's write, a delete, an expiry, a flush). Pushes and replies share the connection, in
//! order, so the only race is a reply that is still on its way to the cache when the
//! invalidation of its key has already been applied: every invalidation therefore advances
//! an epoch, and a reply is kept only if no invalidation of its key came after its read was
//! sent. Redis expires keys lazily, so a row also carries the key's own expiry (`PTTL`).

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use lru::LruCache;
use prometheus_client::metrics::counter::Counter;
use rustc_hash::FxBuildHasher;

use crate::serving::feast::FeastJson;
use crate::serving::FeatureView;

/// Invalidations remembered key by key; a read that saw more of them since it was sent is
/// not kept at all.
const REMEMBERED_INVALIDATIONS: usize = 4096;

/// What Redis held for one entity of one view: the event time and every feature of the view,
/// the values in one buffer (a row costs two allocations, not one per value).
#[derive(Debug)]
pub struct CachedRow {
    /// Epoch ms of the stored event time; `None` when Redis held nothing.
    pub event_time_ms: Option<i64>,
    /// The stored bytes of every feature, one after the other.
    data: Box<[u8]>,
    /// Per feature of the view (in the view's order), where its bytes end in `data` (a
    /// field Redis did not hold ends where the one before it does).
    ends: Box<[usize]>,
    /// Per feature, whether Redis held the field.
    held: Box<[bool]>,
    /// When the key expires in Redis, if it has an expiry.
    pub expires: Option<Instant>,
    /// Read since eviction last passed it over (its second chance).
    used: AtomicBool,
    /// The row as Feast's answer writes it: decoded once, on its first Feast read.
    feast: OnceLock<FeastJson>,
}

impl CachedRow {
    /// A row of `values` (per feature of the view, in its order).
    pub fn new(
        event_time_ms: Option<i64>,
        values: impl IntoIterator<Item = Option<Vec<u8>>>,
        expires: Option<Instant>,
    ) -> Self {
        let mut data = Vec::new();
        let (ends, held): (Vec<usize>, Vec<bool>) = values
            .into_iter()
            .map(|value| {
                let held = value.is_some();
                data.extend_from_slice(value.as_deref().unwrap_or_default());
                (data.len(), held)
            })
            .unzip();
        Self {
            event_time_ms,
            data: data.into(),
            ends: ends.into(),
            held: held.into(),
            expires,
            used: AtomicBool::new(false),
            feast: OnceLock::new(),
        }
    }

    /// The stored bytes of feature `index` (of the view).
    pub fn value(&self, index: usize) -> Option<&[u8]> {
        if !*self.held.get(index)? {
            return None;
        }
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        self.data.get(start..self.ends[index])
    }

    /// Features of the view the row holds a place for.
    pub fn features(&self) -> usize {
        self.held.len()
    }

    /// The row in Feast's JSON (`view` is the row's own), worked out on the first call.
    pub fn feast_json(&self, view: &FeatureView) -> &FeastJson {
        self.feast.get_or_init(|| {
            FeastJson::of(self.features(), |f| self.value(f), self.event_time_ms, view)
        })
    }
}

/// One Redis key's cached rows, by view (a Feast-layout key holds several views').
type KeyRows = Vec<(u32, Arc<CachedRow>)>;

/// Rows of entities by Redis key, at most `capacity` keys, least recently read dropped first.
pub struct Rows {
    state: Mutex<State>,
    invalidations: Counter,
}

struct State {
    rows: LruCache<Vec<u8>, KeyRows, FxBuildHasher>,
    /// Invalidations applied so far.
    epoch: u64,
    /// Hashes of the keys of the latest invalidations, the newest last (the one at the
    /// back was invalidated at `epoch`, the one before it at `epoch - 1`, …).
    recent: VecDeque<u64>,
}

impl State {
    /// A read does not reorder the LRU list (that would write to two more nodes at random
    /// places in memory per entity, the cost that bounded 50-entity reads); it marks the row
    /// used, and eviction gives a used key a second chance at the back instead (CLOCK).
    fn row(&self, key: &[u8], view: u32, now: Instant) -> Option<Arc<CachedRow>> {
        let rows = self.rows.peek(key)?;
        let (_, row) = rows.iter().find(|(v, _)| *v == view)?;
        if matches!(row.expires, Some(expires) if expires <= now) {
            return None;
        }
        if !row.used.load(Ordering::Relaxed) {
            row.used.store(true, Ordering::Relaxed);
        }
        Some(Arc::clone(row))
    }

    /// When full, drops the key inserted or passed over longest ago among those not read
    /// since; ends, as every key it passes over loses its mark.
    fn make_room(&mut self) {
        while self.rows.len() >= self.rows.cap().get() {
            let Some((key, rows)) = self.rows.pop_lru() else {
                return;
            };
            let mut used = false;
            for (_, row) in &rows {
                used |= row.used.swap(false, Ordering::Relaxed);
            }
            if used {
                self.rows.push(key, rows);
            } else {
                return;
            }
        }
    }
}

impl Rows {
    /// An empty cache of at most `capacity` keys; `invalidations` counts the rows dropped
    /// because Redis said they changed or the cache was cleared.
    pub fn new(capacity: NonZeroUsize, invalidations: Counter) -> Self {
        Self {
            state: Mutex::new(State {
                rows: LruCache::with_hasher(capacity, FxBuildHasher),
                epoch: 0,
                recent: VecDeque::with_capacity(REMEMBERED_INVALIDATIONS),
            }),
            invalidations,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves nothing half-done that matters: every
        // operation keeps the map consistent on its own.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The epoch to note before sending a read whose replies go to [`Rows::insert`].
    pub fn epoch(&self) -> u64 {
        self.state().epoch
    }

    /// The row of `view` under each of `keys`, unless absent or past the key's expiry; one
    /// lock for them all.
    pub fn get_all<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        view: u32,
        now: Instant,
    ) -> Vec<Option<Arc<CachedRow>>> {
        let state = self.state();
        keys.into_iter()
            .map(|key| state.row(key, view, now))
            .collect()
    }

    /// The row of `view` under `key`, unless absent or past the key's expiry.
    #[cfg(test)]
    pub fn get(&self, key: &[u8], view: u32, now: Instant) -> Option<Arc<CachedRow>> {
        self.state().row(key, view, now)
    }

    /// Keeps `row` of `view` under `key`, read by a request sent at epoch `read_at`, unless
    /// an invalidation of `key` came since (the row may be older than that write).
    pub fn insert(&self, key: Vec<u8>, view: u32, row: Arc<CachedRow>, read_at: u64) {
        let mut state = self.state();
        if state.epoch != read_at {
            // The invalidations since the read was sent are the last `missed` remembered.
            let missed = usize::try_from(state.epoch.saturating_sub(read_at)).unwrap_or(usize::MAX);
            let hash = FxBuildHasher.hash_one(key.as_slice());
            if missed > state.recent.len()
                || state.recent.iter().rev().take(missed).any(|&h| h == hash)
            {
                return;
            }
        }
        if let Some(rows) = state.rows.peek_mut(key.as_slice()) {
            rows.retain(|(v, _)| *v != view);
            rows.push((view, row));
        } else {
            state.make_room();
            state.rows.push(key, vec![(view, row)]);
        }
    }

    /// Drops the rows of the keys Redis said changed.
    pub fn invalidate<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) {
        let mut state = self.state();
        let mut dropped = 0;
        for key in keys {
            state.epoch += 1;
            if state.recent.len() == REMEMBERED_INVALIDATIONS {
                state.recent.pop_front();
            }
            state.recent.push_back(FxBuildHasher.hash_one(key));
            if let Some(rows) = state.rows.pop(key) {
                dropped += rows.len() as u64;
            }
        }
        self.invalidations.inc_by(dropped);
    }

    /// Drops every row (Redis flushed, or the connection that heard its invalidations
    /// dropped), and every read in flight with them.
    pub fn clear(&self) {
        let mut state = self.state();
        let dropped: usize = state.rows.iter().map(|(_, rows)| rows.len()).sum();
        state.rows.clear();
        state.recent.clear();
        // Past what `recent` remembers: no read sent before this is kept.
        state.epoch += REMEMBERED_INVALIDATIONS as u64 + 1;
        self.invalidations.inc_by(dropped as u64);
    }

    /// Keys held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.state().rows.len()
    }

    /// Whether no key is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn row(value: &'static [u8]) -> Arc<CachedRow> {
        Arc::new(CachedRow::new(Some(1), [Some(value.to_vec())], None))
    }

    fn cache(capacity: usize) -> Rows {
        Rows::new(
            NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            Counter::default(),
        )
    }

    fn value(cache: &Rows, key: &[u8], view: u32) -> Option<Vec<u8>> {
        cache
            .get(key, view, Instant::now())
            .and_then(|row| row.value(0).map(<[u8]>::to_vec))
    }

    #[test]
    fn a_row_gives_back_each_value_null_and_empty_ones_included() {
        let row = CachedRow::new(
            None,
            [
                Some(b"ab".to_vec()),
                None,
                Some(Vec::new()),
                Some(b"c".to_vec()),
            ],
            None,
        );
        assert_eq!(row.value(0), Some(&b"ab"[..]));
        assert_eq!(row.value(1), None);
        assert_eq!(row.value(2), Some(&b""[..]));
        assert_eq!(row.value(3), Some(&b"c"[..]));
        assert_eq!(row.value(4), None);
        assert_eq!(row.features(), 4);
    }

    #[test]
    fn rows_are_kept_per_view_until_their_key_is_invalidated() {
        let cache = cache(10);
        cache.insert(b"k".to_vec(), 0, row(b"a"), cache.epoch());
        cache.insert(b"k".to_vec(), 1, row(b"b"), cache.epoch());
        assert_eq!(value(&cache, b"k", 0).as_deref(), Some(&b"a"[..]));
        assert_eq!(value(&cache, b"k", 1).as_deref(), Some(&b"b"[..]));
        assert!(cache.get(b"k", 2, Instant::now()).is_none());
        cache.invalidate([&b"other"[..]]);
        assert_eq!(value(&cache, b"k", 0).as_deref(), Some(&b"a"[..]));
        cache.invalidate([&b"k"[..]]);
        assert!(cache.get(b"k", 0, Instant::now()).is_none());
        assert!(cache.get(b"k", 1, Instant::now()).is_none());
        assert_eq!(cache.invalidations.get(), 2);
    }

    #[test]
    fn a_reply_read_before_an_invalidation_of_its_key_is_not_kept() {
        let cache = cache(10);
        let sent = cache.epoch();
        // The invalidation was applied while the reply was on its way.
        cache.invalidate([&b"k"[..]]);
        cache.insert(b"k".to_vec(), 0, row(b"old"), sent);
        assert!(cache.is_empty());
        // Another key's invalidation does not hold a reply back.
        let sent = cache.epoch();
        cache.invalidate([&b"other"[..]]);
        cache.insert(b"k".to_vec(), 0, row(b"new"), sent);
        assert_eq!(value(&cache, b"k", 0).as_deref(), Some(&b"new"[..]));
    }

    #[test]
    fn a_reply_older_than_the_remembered_invalidations_is_not_kept() {
        let cache = cache(10);
        let sent = cache.epoch();
        let keys: Vec<Vec<u8>> = (0..=REMEMBERED_INVALIDATIONS)
            .map(|i| format!("other-{i}").into_bytes())
            .collect();
        cache.invalidate(keys.iter().map(Vec::as_slice));
        cache.insert(b"k".to_vec(), 0, row(b"maybe old"), sent);
        assert!(cache.is_empty());
    }

    #[test]
    fn clearing_drops_every_row_and_every_read_in_flight() {
        let cache = cache(10);
        cache.insert(b"a".to_vec(), 0, row(b"1"), cache.epoch());
        let sent = cache.epoch();
        cache.clear();
        assert!(cache.is_empty());
        cache.insert(b"b".to_vec(), 0, row(b"2"), sent);
        assert!(cache.is_empty());
    }

    #[test]
    fn rows_past_their_key_expiry_are_not_answered_and_the_least_recent_key_goes_first() {
        let cache = cache(2);
        let now = Instant::now();
        let expiring = Arc::new(CachedRow::new(
            Some(1),
            [None],
            Some(now + Duration::from_millis(50)),
        ));
        cache.insert(b"e".to_vec(), 0, expiring, cache.epoch());
        assert!(cache.get(b"e", 0, now).is_some());
        assert!(cache
            .get(b"e", 0, now + Duration::from_millis(50))
            .is_none());
        cache.insert(b"a".to_vec(), 0, row(b"1"), cache.epoch());
        cache.get(b"e", 0, now);
        cache.insert(b"b".to_vec(), 0, row(b"2"), cache.epoch());
        assert_eq!(cache.len(), 2);
        assert!(cache.get(b"a", 0, now).is_none(), "least recently read");
        assert!(cache.get(b"e", 0, now).is_some());
    }

    #[test]
    fn eviction_passes_over_keys_read_since_and_all_at_once_reads_many() {
        let cache = cache(3);
        let now = Instant::now();
        for key in [b"a", b"b", b"c"] {
            cache.insert(key.to_vec(), 0, row(b"v"), cache.epoch());
        }
        // a and c read; b, never read, is the one to go, though a is older.
        let read = cache.get_all([&b"a"[..], &b"c"[..], &b"x"[..]], 0, now);
        assert_eq!(
            read.iter().map(Option::is_some).collect::<Vec<_>>(),
            [true, true, false]
        );
        cache.insert(b"d".to_vec(), 0, row(b"v"), cache.epoch());
        assert!(cache.get(b"b", 0, now).is_none());
        // Every key read: each loses its mark once, then the first passed over (c: a went
        // behind it when b was evicted) goes.
        cache.get_all([&b"a"[..], &b"c"[..], &b"d"[..]], 0, now);
        cache.insert(b"e".to_vec(), 0, row(b"v"), cache.epoch());
        assert_eq!(cache.len(), 3);
        assert!(cache.get(b"c", 0, now).is_none());
        for kept in [b"a", b"d", b"e"] {
            assert!(cache.get(kept, 0, now).is_some());
        }
    }
}
