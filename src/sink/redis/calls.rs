//! Latest-wins script calls, built straight from a layout's values into Redis commands.
//!
//! Layouts hand each entity's newest values to an [`EntityWrites`] receiver instead of
//! returning owned field/value vectors: the connector's receiver, [`ScriptCalls`], appends
//! them to one `EVALSHA` command per entity, so a value is copied once on its way to the
//! wire (it used to be copied four times, with an allocation for each field and value).

use redis::{Cmd, Script};

use super::layout::EntityWrite;

/// Receives each entity's newest values in the order the latest-wins script takes them:
/// [`entity`](Self::entity) (saying how many [`set`](Self::set) calls follow), its sets,
/// then its [`delete`](Self::delete)s.
pub trait EntityWrites {
    /// Starts an entity: its Redis key, event time, the bytes stored in the time field and
    /// the number of fields that will be set.
    fn entity(&mut self, key: &[u8], event_time_ms: i64, time_value: &[u8], sets: usize);
    /// A field to set on the current entity.
    fn set(&mut self, field: &[u8], value: &[u8]);
    /// A field to remove from the current entity (its feature is null).
    fn delete(&mut self, field: &[u8]);
}

/// One `EVALSHA` of the latest-wins script per entity (see `writer::LATEST_WINS_LUA` for
/// the argument order).
pub struct ScriptCalls<'a> {
    hash: &'a str,
    ttl_ms: i64,
    time_field: &'a [u8],
    time_encoding: &'a str,
    calls: Vec<Cmd>,
    /// Arguments and bytes of the largest call so far: the next one is allocated that big,
    /// instead of growing its buffers several times.
    largest: (usize, usize),
    current: (usize, usize),
}

impl<'a> ScriptCalls<'a> {
    /// Calls of `script` that apply `ttl_ms` and compare times stored in `time_field`.
    pub fn new(
        script: &'a Script,
        ttl_ms: i64,
        time_field: &'a [u8],
        time_encoding: &'a str,
    ) -> Self {
        Self {
            hash: script.get_hash(),
            ttl_ms,
            time_field,
            time_encoding,
            calls: Vec::new(),
            largest: (16, 256),
            current: (0, 0),
        }
    }

    /// The commands built so far, one per entity.
    pub fn into_commands(self) -> Vec<Cmd> {
        self.calls
    }

    fn grow_current(&mut self, args: usize, bytes: usize) {
        self.current = (self.current.0 + args, self.current.1 + bytes);
    }
}

impl EntityWrites for ScriptCalls<'_> {
    fn entity(&mut self, key: &[u8], event_time_ms: i64, time_value: &[u8], sets: usize) {
        self.largest = (
            self.largest.0.max(self.current.0),
            self.largest.1.max(self.current.1),
        );
        self.current = (
            10,
            64 + key.len() + self.time_field.len() + time_value.len(),
        );
        let mut call = Cmd::with_capacity(self.largest.0, self.largest.1);
        call.arg("EVALSHA")
            .arg(self.hash)
            .arg(1)
            .arg(key)
            .arg(event_time_ms)
            .arg(self.ttl_ms)
            .arg(self.time_field)
            .arg(self.time_encoding)
            .arg(time_value)
            .arg(sets);
        self.calls.push(call);
    }

    fn set(&mut self, field: &[u8], value: &[u8]) {
        if let Some(call) = self.calls.last_mut() {
            call.arg(field).arg(value);
        }
        self.grow_current(2, field.len() + value.len());
    }

    fn delete(&mut self, field: &[u8]) {
        if let Some(call) = self.calls.last_mut() {
            call.arg(field);
        }
        self.grow_current(1, field.len());
    }
}

/// Collects owned writes, for tests and for reading a layout's output.
impl EntityWrites for Vec<EntityWrite> {
    fn entity(&mut self, key: &[u8], event_time_ms: i64, time_value: &[u8], sets: usize) {
        self.push(EntityWrite {
            key: key.to_vec(),
            event_time_ms,
            time_value: time_value.to_vec(),
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
mod tests {
    use super::*;

    #[test]
    fn one_evalsha_per_entity_in_the_scripts_argument_order() {
        let script = Script::new("return 1");
        let mut calls = ScriptCalls::new(&script, 60_000, b"_ts", "ms");
        calls.entity(b"fc:users:a", 30, b"30", 1);
        calls.set(b"vip", b"true");
        calls.delete(b"ctr");
        let commands = calls.into_commands();
        assert_eq!(commands.len(), 1);
        let args: Vec<Vec<u8>> = commands[0]
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => b"<cursor>".to_vec(),
            })
            .collect();
        let expected: Vec<&[u8]> = vec![
            b"EVALSHA",
            script.get_hash().as_bytes(),
            b"1",
            b"fc:users:a",
            b"30",
            b"60000",
            b"_ts",
            b"ms",
            b"30",
            b"1",
            b"vip",
            b"true",
            b"ctr",
        ];
        assert_eq!(args, expected);
    }
}
