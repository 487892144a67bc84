//! Latest-wins script calls, built straight from a layout's values into Redis commands.
//!
//! Layouts hand each entity's newest values to an `EntityWrites` receiver instead of
//! returning owned field/value vectors. The connector's receiver, [`ScriptCalls`], packs
//! many entities into one `EVALSHA` of the latest-wins script (one per batch chunk; on a
//! cluster one per hash slot, since a script may only touch keys of one slot): a script call
//! costs Redis several times a plain write, so one call per entity dominated its CPU.

use rustc_hash::FxHashMap;

use redis::cluster_routing::Slot;
use redis::{Cmd, Script};

use super::entity_write::EntityWrites;

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
#[cfg(test)]
mod tests {
    // The script calls' argument layout, with and without ties.

    use super::*;

    fn args(command: &Cmd) -> Vec<Vec<u8>> {
        command
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => b"<cursor>".to_vec(),
            })
            .collect()
    }

    #[test]
    fn one_evalsha_for_many_entities_keys_first_fields_named_once() {
        let script = Script::new("return 1");
        let mut calls = ScriptCalls::new(&script, 60_000, (b"_ts", "ms"), None, false);
        // The first entity names the call's fields.
        calls.entity(b"fc:users:a", 30, b"30", None, 2);
        calls.set(b"vip", b"true");
        calls.set(b"ctr", b"0.1");
        // Same fields in the same order, one deleted too: values only.
        calls.entity(b"fc:users:b", 40, b"40", None, 2);
        calls.set(b"vip", b"false");
        calls.set(b"ctr", b"0.5");
        calls.delete(b"old");
        // A null feature: fewer sets, so pairs (the matched prefix rebuilt from the names).
        calls.entity(b"fc:users:c", 50, b"50", None, 1);
        calls.set(b"vip", b"true");
        calls.delete(b"ctr");
        // Other fields: pairs.
        calls.entity(b"fc:users:d", 60, b"60", None, 2);
        calls.set(b"ctr", b"0.7");
        calls.set(b"vip", b"false");
        let commands = calls.into_commands();
        assert_eq!(commands.len(), 1);
        let expected: Vec<&[u8]> = vec![
            b"EVALSHA",
            script.get_hash().as_bytes(),
            b"4",
            b"fc:users:a",
            b"fc:users:b",
            b"fc:users:c",
            b"fc:users:d",
            b"60000",
            b"_ts",
            b"ms",
            b"2",
            b"vip",
            b"ctr",
            b"30",
            b"30",
            b"-1",
            b"0",
            b"true",
            b"0.1",
            b"40",
            b"40",
            b"-1",
            b"1",
            b"false",
            b"0.5",
            b"old",
            b"50",
            b"50",
            b"1",
            b"1",
            b"vip",
            b"true",
            b"ctr",
            b"60",
            b"60",
            b"2",
            b"0",
            b"ctr",
            b"0.7",
            b"vip",
            b"false",
        ];
        assert_eq!(args(&commands[0]), expected);
    }

    #[test]
    fn with_ties_each_entity_carries_its_tie_value_after_its_time_value() {
        let script = Script::new("return 1");
        let mut calls = ScriptCalls::new(&script, -1, (b"_ts:v", "pbts"), Some(b"_tie:v"), false);
        calls.entity(b"k1", 30, b"t30", Some(b"00000000000000000007:east"), 1);
        calls.set(b"f", b"1");
        // Other fields: pairs, the tie value still right after the time value.
        calls.entity(b"k2", 40, b"t40", Some(b"00000000000000000009:west"), 1);
        calls.set(b"g", b"2");
        calls.delete(b"f");
        // No tie value given: an empty one, losing every tie.
        calls.entity(b"k3", 50, b"t50", None, 0);
        let commands = calls.into_commands();
        let expected: Vec<&[u8]> = vec![
            b"EVALSHA",
            script.get_hash().as_bytes(),
            b"3",
            b"k1",
            b"k2",
            b"k3",
            b"-1",
            b"_ts:v",
            b"pbts:_tie:v",
            b"1",
            b"f",
            b"30",
            b"t30",
            b"00000000000000000007:east",
            b"-1",
            b"0",
            b"1",
            b"40",
            b"t40",
            b"00000000000000000009:west",
            b"1",
            b"1",
            b"g",
            b"2",
            b"f",
            b"50",
            b"t50",
            b"",
            b"0",
            b"0",
        ];
        assert_eq!(args(&commands[0]), expected);

        // Without ties a tie value given is not sent, and the mode is the encoding alone.
        let mut calls = ScriptCalls::new(&script, -1, (b"_ts:v", "pbts"), None, false);
        calls.entity(b"k1", 30, b"t30", Some(b"00000000000000000007:east"), 1);
        calls.set(b"f", b"1");
        let expected: Vec<&[u8]> = vec![
            b"EVALSHA",
            script.get_hash().as_bytes(),
            b"1",
            b"k1",
            b"-1",
            b"_ts:v",
            b"pbts",
            b"1",
            b"f",
            b"30",
            b"t30",
            b"-1",
            b"0",
            b"1",
        ];
        assert_eq!(args(&calls.into_commands()[0]), expected);
    }

    #[test]
    fn a_full_call_starts_the_next_and_a_cluster_gets_one_call_per_slot() {
        let script = Script::new("return 1");
        let mut calls = ScriptCalls::new(&script, 0, (b"_ts", "ms"), None, false);
        for i in 0..MAX_ENTITIES_PER_CALL + 1 {
            calls.entity(format!("k:{i}").as_bytes(), 1, b"1", None, 0);
        }
        let counts: Vec<Vec<u8>> = calls
            .into_commands()
            .iter()
            .map(|c| args(c)[2].clone())
            .collect();
        assert_eq!(counts, vec![b"256".to_vec(), b"1".to_vec()]);

        let mut calls = ScriptCalls::new(&script, 0, (b"_ts", "ms"), None, true);
        // `{a}` hash tags put the first two in one slot.
        for key in [&b"x:{a}:1"[..], b"x:{a}:2", b"x:{b}:1"] {
            calls.entity(key, 1, b"1", None, 1);
            calls.set(b"f", key);
        }
        let mut per_call: Vec<usize> = calls
            .into_commands()
            .iter()
            .map(|c| String::from_utf8_lossy(&args(c)[2]).parse().unwrap_or(0))
            .collect();
        per_call.sort_unstable();
        assert_eq!(per_call, vec![1, 2]);
    }
}
