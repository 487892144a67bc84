//! Latest-wins script calls, built straight from a layout's values into Redis commands.
//!
//! Layouts hand each entity's newest values to an [`EntityWrites`] receiver instead of
//! returning owned field/value vectors. The connector's receiver, [`ScriptCalls`], packs
//! many entities into one `EVALSHA` of the latest-wins script (one per batch chunk; on a
//! cluster one per hash slot, since a script may only touch keys of one slot): a script call
//! costs Redis several times a plain write, so one call per entity dominated its CPU.

use rustc_hash::FxHashMap;

use redis::cluster_routing::Slot;
use redis::{Cmd, Script};

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

/// Most entities in one script call: Redis runs a script to its end before serving anyone
/// else, so a call stays well under a millisecond.
pub const MAX_ENTITIES_PER_CALL: usize = 256;

/// Builds `EVALSHA`s of the latest-wins script (see `writer::LATEST_WINS_LUA` for the
/// argument order), each for up to [`MAX_ENTITIES_PER_CALL`] entities.
pub struct ScriptCalls<'a> {
    hash: &'a str,
    ttl_ms: i64,
    time_field: &'a [u8],
    /// The time encoding, followed by `:<tie field>` when ties are broken.
    mode: Vec<u8>,
    /// Whether each entity carries a tie value.
    ties: bool,
    /// Group entities by hash slot (Redis Cluster).
    by_slot: bool,
    open: FxHashMap<Option<Slot>, Chunk>,
    /// The chunk of the entity being written.
    current: Option<Option<Slot>>,
    calls: Vec<Cmd>,
}

/// The entities of one future call. Keys must precede every argument in the command, so
/// values are gathered here and the command is assembled when the chunk is full or done.
///
/// The call names its fields once: the first entity's set fields become the call's
/// `fields`, and an entity that sets exactly those, in that order, sends only its values
/// (a pipeline's rows mostly share their fields, so Redis parses a name per field per call
/// instead of per entity). Any other entity sends field/value pairs.
#[derive(Default)]
struct Chunk {
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    entities: Vec<Entity>,
    args: Vec<u8>,
    arg_ends: Vec<usize>,
    fields: Vec<u8>,
    field_ends: Vec<usize>,
}

/// One entity of a chunk: its event time, its time value and field arguments in `args`.
struct Entity {
    event_time_ms: i64,
    sets: usize,
    deletes: usize,
    /// Leading sets whose field is the call's field of the same index: only their values
    /// are in `args`; pairs follow for the rest.
    matched: usize,
    /// Sets seen so far.
    seen: usize,
    /// Index in `arg_ends` of the time value; its tie value (when ties are broken), sets
    /// and deletes follow.
    first_arg: usize,
}

impl Entity {
    fn uses_call_fields(&self, call_fields: usize) -> bool {
        self.matched == self.sets && self.sets == call_fields
    }
}

impl Chunk {
    fn push_arg(&mut self, bytes: &[u8]) {
        self.args.extend_from_slice(bytes);
        self.arg_ends.push(self.args.len());
    }

    fn arg(&self, index: usize) -> &[u8] {
        let start = index.checked_sub(1).map_or(0, |i| self.arg_ends[i]);
        &self.args[start..self.arg_ends[index]]
    }

    fn field(&self, index: usize) -> &[u8] {
        let start = index.checked_sub(1).map_or(0, |i| self.field_ends[i]);
        &self.fields[start..self.field_ends[index]]
    }

    /// Files a set of the current entity: its value alone while its fields match the
    /// call's (the first entity defines them), a field/value pair from the first mismatch on.
    fn push_set(&mut self, field: &[u8], value: &[u8]) {
        let defining = self.entities.len() == 1;
        let Some(entity) = self.entities.last_mut() else {
            return;
        };
        let index = entity.seen;
        entity.seen += 1;
        if entity.matched == index {
            if defining {
                self.fields.extend_from_slice(field);
                self.field_ends.push(self.fields.len());
            }
            if index < self.field_ends.len() {
                let start = index.checked_sub(1).map_or(0, |i| self.field_ends[i]);
                if &self.fields[start..self.field_ends[index]] == field {
                    entity.matched += 1;
                    self.push_arg(value);
                    return;
                }
            }
        }
        self.push_arg(field);
        self.push_arg(value);
    }

    fn command(&self, calls: &ScriptCalls<'_>) -> Cmd {
        let count = self.entities.len();
        let call_fields = self.field_ends.len();
        let mut call = Cmd::with_capacity(
            7 + call_fields + count * 6 + self.arg_ends.len(),
            64 + self.keys.len() + self.fields.len() + self.args.len() + count * 24,
        );
        call.arg("EVALSHA").arg(calls.hash).arg(count);
        let mut start = 0;
        for &end in &self.key_ends {
            call.arg(&self.keys[start..end]);
            start = end;
        }
        call.arg(calls.ttl_ms)
            .arg(calls.time_field)
            .arg(calls.mode.as_slice())
            .arg(call_fields);
        for index in 0..call_fields {
            call.arg(self.field(index));
        }
        for entity in &self.entities {
            call.arg(entity.event_time_ms)
                .arg(self.arg(entity.first_arg));
            let mut next = entity.first_arg + 1;
            if calls.ties {
                call.arg(self.arg(next));
                next += 1;
            }
            if entity.uses_call_fields(call_fields) {
                call.arg(-1).arg(entity.deletes);
                for index in next..next + entity.sets {
                    call.arg(self.arg(index));
                }
                next += entity.sets;
            } else {
                call.arg(entity.sets).arg(entity.deletes);
                for index in 0..entity.matched {
                    call.arg(self.field(index)).arg(self.arg(next + index));
                }
                next += entity.matched;
                for index in next..next + 2 * (entity.sets - entity.matched) {
                    call.arg(self.arg(index));
                }
                next += 2 * (entity.sets - entity.matched);
            }
            for index in next..next + entity.deletes {
                call.arg(self.arg(index));
            }
        }
        call
    }
}

impl<'a> ScriptCalls<'a> {
    /// Calls of `script` that apply `ttl_ms` and compare times stored in `time_field`
    /// (encoded as `time_encoding`), and at equal times the tie values stored in
    /// `tie_field` when one is given; `by_slot` for Redis Cluster.
    pub fn new(
        script: &'a Script,
        ttl_ms: i64,
        (time_field, time_encoding): (&'a [u8], &str),
        tie_field: Option<&[u8]>,
        by_slot: bool,
    ) -> Self {
        let mut mode = time_encoding.as_bytes().to_vec();
        if let Some(field) = tie_field {
            mode.push(b':');
            mode.extend_from_slice(field);
        }
        Self {
            hash: script.get_hash(),
            ttl_ms,
            time_field,
            mode,
            ties: tie_field.is_some(),
            by_slot,
            open: FxHashMap::default(),
            current: None,
            calls: Vec::new(),
        }
    }

    /// The commands: every chunk's script call.
    pub fn into_commands(mut self) -> Vec<Cmd> {
        let open = std::mem::take(&mut self.open);
        for chunk in open.into_values() {
            let call = chunk.command(&self);
            self.calls.push(call);
        }
        self.calls
    }

    fn current_chunk(&mut self) -> Option<&mut Chunk> {
        let slot = self.current?;
        self.open.get_mut(&slot)
    }
}

impl EntityWrites for ScriptCalls<'_> {
    fn entity(
        &mut self,
        key: &[u8],
        event_time_ms: i64,
        time_value: &[u8],
        tie: Option<&[u8]>,
        sets: usize,
    ) {
        let ties = self.ties;
        let slot = self.by_slot.then(|| Slot::for_key(key));
        if self
            .open
            .get(&slot)
            .is_some_and(|chunk| chunk.entities.len() >= MAX_ENTITIES_PER_CALL)
        {
            if let Some(full) = self.open.remove(&slot) {
                let call = full.command(self);
                self.calls.push(call);
            }
        }
        self.current = Some(slot);
        let chunk = self.open.entry(slot).or_default();
        chunk.keys.extend_from_slice(key);
        chunk.key_ends.push(chunk.keys.len());
        let first_arg = chunk.arg_ends.len();
        chunk.push_arg(time_value);
        if ties {
            // A missing tie value is empty: it loses every tie.
            chunk.push_arg(tie.unwrap_or_default());
        }
        chunk.entities.push(Entity {
            event_time_ms,
            sets,
            deletes: 0,
            matched: 0,
            seen: 0,
            first_arg,
        });
    }

    fn set(&mut self, field: &[u8], value: &[u8]) {
        if let Some(chunk) = self.current_chunk() {
            chunk.push_set(field, value);
        }
    }

    fn delete(&mut self, field: &[u8]) {
        if let Some(chunk) = self.current_chunk() {
            chunk.push_arg(field);
            if let Some(entity) = chunk.entities.last_mut() {
                entity.deletes += 1;
            }
        }
    }
}

/// Collects owned writes, for tests and for reading a layout's output.
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

#[cfg(test)]
#[path = "calls_tests.rs"]
mod tests;
