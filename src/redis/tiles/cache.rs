//! The tiles this sink last wrote, per entity, so that the next update of the entity skips
//! reading them back: an entity's events come from one partition, read by one replica at a
//! time, so in the steady state no one else writes its hash and the copy is current. The
//! write still checks the hash's version, so a copy gone stale (a partition handed over and
//! back, the key expired, deleted or evicted) only costs the update a read and a retry.
//!
//! Versions are written by the sink, unique per write (a random number of the process and a
//! count), never a counter: a hash deleted and written again from scratch must not come
//! back to a version a stale copy still holds.

use lru::LruCache;
use rustc_hash::FxBuildHasher;

/// Bytes of copies kept at most (keys and values as Redis holds them).
pub const CACHE_BYTES: usize = 64 << 20;

/// An entity's hash as this sink last wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The version written.
    pub version: Vec<u8>,
    /// The positions field.
    pub positions: Vec<u8>,
    /// The tiles field.
    pub tiles: Vec<u8>,
}

impl Written {
    fn bytes(&self, key: &str) -> usize {
        key.len() + self.version.len() + self.positions.len() + self.tiles.len()
    }
}

/// The copies, least recently used first out, within [`CACHE_BYTES`].
pub struct TileCache {
    entries: LruCache<String, Written, FxBuildHasher>,
    bytes: usize,
    budget: usize,
    /// This process's part of every version it writes.
    nonce: u64,
    writes: u64,
}

impl std::fmt::Debug for TileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileCache")
            .field("entities", &self.entries.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl TileCache {
    /// An empty cache of at most `budget` bytes.
    pub fn new(budget: usize) -> Self {
        TileCache {
            entries: LruCache::unbounded_with_hasher(FxBuildHasher),
            bytes: 0,
            budget,
            nonce: uuid::Uuid::new_v4().as_u64_pair().0,
            writes: 0,
        }
    }

    /// The copy of `key`'s hash, if kept (marking it the most recently used).
    #[cfg(test)]
    pub fn get(&mut self, key: &str) -> Option<&Written> {
        self.entries.get(key)
    }

    /// Takes the copy of `key`'s hash out (an update puts back what it writes).
    pub fn take(&mut self, key: &str) -> Option<Written> {
        let (key, copy) = self.entries.pop_entry(key)?;
        self.bytes -= copy.bytes(&key);
        Some(copy)
    }

    /// A version no write of any process has used.
    pub fn next_version(&mut self) -> Vec<u8> {
        self.writes += 1;
        format!("{:016x}{:x}", self.nonce, self.writes).into_bytes()
    }

    /// Keeps `written` as `key`'s hash, dropping the least recently used copies over budget.
    pub fn put(&mut self, key: String, written: Written) {
        let bytes = written.bytes(&key);
        if bytes > self.budget {
            self.remove(&key);
            return;
        }
        if let Some(old) = self.entries.put(key.clone(), written) {
            self.bytes -= old.bytes(&key);
        }
        self.bytes += bytes;
        while self.bytes > self.budget {
            match self.entries.pop_lru() {
                Some((key, old)) => self.bytes -= old.bytes(&key),
                None => break,
            }
        }
    }

    /// Forgets `key`'s copy (another writer changed the hash).
    pub fn remove(&mut self, key: &str) {
        self.take(key);
    }

    /// Entities kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

impl Default for TileCache {
    fn default() -> Self {
        TileCache::new(CACHE_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(tiles: usize) -> Written {
        Written {
            version: b"v".to_vec(),
            positions: b"p".to_vec(),
            tiles: vec![0; tiles],
        }
    }

    #[test]
    fn copies_stay_within_the_budget_least_recently_used_first_out() {
        let mut cache = TileCache::new(100);
        cache.put("a".into(), written(27)); // 30 bytes with key, version and positions
        cache.put("b".into(), written(27));
        cache.put("c".into(), written(27));
        assert!(cache.get("a").is_some(), "a is now the most recently used");
        cache.put("d".into(), written(27));
        assert!(cache.get("b").is_none(), "b was the least recently used");
        assert_eq!(cache.len(), 3);
        cache.put("a".into(), written(7));
        cache.put("e".into(), written(200));
        assert!(cache.get("e").is_none(), "larger than the whole budget");
        cache.remove("a");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn versions_never_repeat_within_a_process_or_across_processes() {
        let mut one = TileCache::default();
        let mut other = TileCache::default();
        let a = one.next_version();
        assert_ne!(a, one.next_version());
        assert_ne!(a, other.next_version());
    }
}
