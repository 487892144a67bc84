//! What a layout hands on per entity: its newest values, as calls on an [`EntityWrites`]
//! receiver (the script calls build commands straight from them) or collected as owned
//! [`EntityWrite`]s.

/// The newest values of one entity in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityWrite {
    /// The Redis key.
    pub key: Vec<u8>,
    /// Event time of the values, epoch milliseconds.
    pub event_time_ms: i64,
    /// The bytes stored in the time field (decimal ms, or a protobuf Timestamp for Feast).
    pub time_value: Vec<u8>,
    /// The tie value of the row (see [`super::ties`]), when ties are broken.
    pub tie: Option<Vec<u8>>,
    /// Fields to set.
    pub set: Vec<(Vec<u8>, Vec<u8>)>,
    /// Fields to remove (null features).
    pub delete: Vec<Vec<u8>>,
}

/// Receives each entity's newest values in the order the latest-wins script takes them:
/// [`entity`](Self::entity) (saying how many [`set`](Self::set) calls follow), its sets,
/// then its [`delete`](Self::delete)s.
pub trait EntityWrites {
    /// Starts an entity: its Redis key, event time, the bytes stored in the time field, its
    /// tie value when ties are broken (see [`super::ties`]) and the number of fields that
    /// will be set.
    fn entity(
        &mut self,
        key: &[u8],
        event_time_ms: i64,
        time_value: &[u8],
        tie: Option<&[u8]>,
        sets: usize,
    );
    /// A field to set on the current entity.
    fn set(&mut self, field: &[u8], value: &[u8]);
    /// A field to remove from the current entity (its feature is null).
    fn delete(&mut self, field: &[u8]);
}

impl EntityWrites for Vec<EntityWrite> {
    fn entity(
        &mut self,
        key: &[u8],
        event_time_ms: i64,
        time_value: &[u8],
        tie: Option<&[u8]>,
        sets: usize,
    ) {
        self.push(EntityWrite {
            key: key.to_vec(),
            event_time_ms,
            time_value: time_value.to_vec(),
            tie: tie.map(<[u8]>::to_vec),
            set: Vec::with_capacity(sets),
            delete: Vec::new(),
        });
    }

    fn set(&mut self, field: &[u8], value: &[u8]) {
        if let Some(write) = self.last_mut() {
            write.set.push((field.to_vec(), value.to_vec()));
        }
    }

    fn delete(&mut self, field: &[u8]) {
        if let Some(write) = self.last_mut() {
            write.delete.push(field.to_vec());
        }
    }
}
