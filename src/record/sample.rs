//! A stable sample of entities: a share of them chosen by a hash of their join key values, so
//! that the same entities are chosen on every request, in every process and every version
//! (`std::hash` promises none of that). The feature log keeps these entities' rows and the
//! audit compares the same ones, both through [`entity_hash`].

/// FNV-1a's 64-bit offset basis and prime.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A stable 64-bit hash of an entity's join key values (as text, in the view's key order):
/// FNV-1a over each value's UTF-8 bytes, each followed by the byte `0xFF` (which UTF-8 never
/// holds, so `["ab", "c"]` and `["a", "bc"]` differ), then MurmurHash3's 64-bit finalizer so
/// that every bit depends on every input byte. Fixed forever: logged tables and audits of
/// different versions choose the same entities.
pub fn entity_hash(key_values: &[String]) -> u64 {
    let mut hasher = KeyHasher::new();
    for value in key_values {
        hasher.value(value.as_bytes());
    }
    hasher.finish()
}

/// [`entity_hash`] fed one key value at a time, for readers that have the values as bytes
/// and would rather not gather them into strings first.
#[derive(Debug, Clone, Copy)]
pub struct KeyHasher(u64);

impl Default for KeyHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyHasher {
    /// A hasher before the first value.
    pub fn new() -> Self {
        Self(FNV_OFFSET)
    }

    /// Adds the next key value's text.
    pub fn value(&mut self, text: &[u8]) {
        for &byte in text.iter().chain(&[0xFF]) {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// The hash of the values added.
    pub fn finish(self) -> u64 {
        finalize(self.0)
    }
}

/// MurmurHash3's `fmix64`.
fn finalize(mut hash: u64) -> u64 {
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// The share of entities kept: an entity is kept when its [`entity_hash`] is below
/// `rate * 2^64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRate {
    /// Hashes below this are kept; `None` keeps every entity (rate 1).
    below: Option<u64>,
}

impl SampleRate {
    /// The share `rate` (0 < rate ≤ 1; 1 and more keep everything, 0 and less nothing).
    pub fn new(rate: f64) -> Self {
        if rate >= 1.0 {
            return Self { below: None };
        }
        // 2^64 as a float; the product is below it, so the cast cannot saturate wrongly.
        let below = if rate > 0.0 {
            (rate * 18_446_744_073_709_551_616.0) as u64
        } else {
            0
        };
        Self { below: Some(below) }
    }

    /// Whether the entity of `key_values` is kept.
    pub fn keeps(&self, key_values: &[String]) -> bool {
        match self.below {
            None => true,
            Some(below) => entity_hash(key_values) < below,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_string()).collect()
    }

    #[test]
    fn the_hash_is_fixed_and_separates_values() {
        // Pinned (checked against a Python FNV-1a + fmix64): a change of these numbers changes which entities every log and audit keeps.
        assert_eq!(entity_hash(&keys(&["user-1"])), 0xa299_24b8_7e5d_9430);
        assert_eq!(entity_hash(&[]), finalize(FNV_OFFSET));
        assert_ne!(
            entity_hash(&keys(&["ab", "c"])),
            entity_hash(&keys(&["a", "bc"]))
        );
        assert_ne!(entity_hash(&keys(&["1"])), entity_hash(&keys(&["2"])));
    }

    #[test]
    fn a_rate_keeps_the_same_entities_every_time_and_about_its_share() {
        let entities: Vec<Vec<String>> = (0..20_000)
            .map(|i| vec![format!("user-{i}"), (i % 7).to_string()])
            .collect();
        let half = SampleRate::new(0.5);
        let first: Vec<bool> = entities.iter().map(|e| half.keeps(e)).collect();
        let second: Vec<bool> = entities
            .iter()
            .map(|e| SampleRate::new(0.5).keeps(e))
            .collect();
        assert_eq!(first, second);
        let kept = first.iter().filter(|k| **k).count();
        assert!((9_500..10_500).contains(&kept), "{kept} of 20000");

        let tenth = SampleRate::new(0.1);
        let kept_tenth: Vec<bool> = entities.iter().map(|e| tenth.keeps(e)).collect();
        let count = kept_tenth.iter().filter(|k| **k).count();
        assert!((1_800..2_200).contains(&count), "{count} of 20000");
        // A smaller rate keeps a subset of a larger one's entities.
        assert!(kept_tenth.iter().zip(&first).all(|(t, h)| !t || *h));

        assert!(entities.iter().all(|e| SampleRate::new(1.0).keeps(e)));
        assert!(!entities.iter().any(|e| SampleRate::new(0.0).keeps(e)));
    }
}
