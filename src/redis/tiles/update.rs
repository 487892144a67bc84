//! Applying a batch's events to the entities' tiles: start from the copy this sink last
//! wrote ([`TileCache`]) or, for an entity it has no copy of, from no tiles at all; apply
//! in the process what they do not hold yet; and write back only if the hash is still what
//! the update started from. A hash that is not (it existed, or another writer, such as a
//! replica during a partition hand-over, updated it) comes back in the script's answer, and
//! the entity is applied again from it. An entity new to the store thus costs one round
//! trip, not a read and a write. Each entity's update is atomic, so its tiles and positions
//! always agree, and a replay of any part of a stream is harmless.

use std::time::{Duration, Instant};

use redis::{Cmd, Script, Value};

use super::cache::{TileCache, Written};
use super::events::EntityEvents;
use super::layout::{decode_positions, encode_positions, TileError, TileLayout};
use crate::aggregate::{AppliedPositions, ReplayOutcome, Tiles};
use crate::redis::RedisConnection;
use crate::source::Offset;

/// Writes each entity's tiles if its version is still the one the update started from,
/// atomically per call. KEYS: the entities' hashes; ARGV[1] the expiry in ms (0: none),
/// then per key the version started from (`''`: no hash), the version to write, the
/// positions and the tiles. Returns per key 1 when written, else the hash's version,
/// positions and tiles as they are.
const UPDATE_LUA: &str = r"
local expiry, out = tonumber(ARGV[1]), {}
for k = 1, #KEYS do
  local a = 2 + (k - 1) * 4
  local v = redis.call('HGET', KEYS[k], '_v')
  if (v or '') == ARGV[a] then
    redis.call('HSET', KEYS[k], '_v', ARGV[a + 1], '_p', ARGV[a + 2], '_t', ARGV[a + 3])
    if expiry > 0 then redis.call('PEXPIRE', KEYS[k], expiry) end
    out[k] = 1
  else
    out[k] = redis.call('HMGET', KEYS[k], '_v', '_p', '_t')
  end
end
return out
";

/// Entities per script call on a single server: one call's fixed cost (about as much as
/// the work of a few entities) spread over many. On a cluster each entity is a call of its
/// own, routed by its key.
const ENTITIES_PER_CALL: usize = 64;

/// The script of every tile update.
pub fn update_script() -> Script {
    Script::new(UPDATE_LUA)
}

/// Why an update did not finish.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// Redis did not answer or refused: retry the batch (what was written is held).
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// The script answered something it never sends: retry the batch.
    #[error("the tile update script answered {0}")]
    Answer(String),
}

/// What a batch's update did, over its entities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// Events applied, already held, late.
    pub events: ReplayOutcome,
    /// Entity updates that found another writer's update first and were done again.
    pub conflicts: usize,
    /// Entities the sink had no copy of whose hash was there: done again from it.
    pub found_stored: usize,
    /// Entities whose stored tiles could not be read: they start from empty tiles.
    pub unreadable: usize,
    /// Time spent applying in the process, waiting for the first writes, and redoing the
    /// entities whose hash was not what the update started from.
    pub phases: UpdatePhases,
}

/// Where an update's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdatePhases {
    /// Decoding, applying and encoding in the process, first round.
    pub apply: Duration,
    /// The first round's script calls.
    pub write: Duration,
    /// The later rounds, all of their work (`None`: every entity was written in the first).
    pub redo: Option<Duration>,
}

/// What an update starts an entity from: the copy of what this sink wrote, the fields a
/// script found, or nothing (the sink has no copy; the hash is taken to be absent).
enum Start {
    Copy(Written),
    Found([Option<Vec<u8>>; 3]),
    Guess,
}

/// Applies `entities`' events to their tiles at time `now` (ms since 1970: tiles no later
/// read covers are dropped), keeping each hash `expiry_ms` after the update. An entity
/// starts from the copy `cache` keeps, or from no tiles; the written hashes are kept there.
pub async fn update_tiles(
    connection: &mut RedisConnection,
    (script, cache): (&Script, &mut TileCache),
    layout: &TileLayout,
    entities: &[EntityEvents],
    (now, expiry_ms): (i64, i64),
) -> Result<UpdateOutcome, UpdateError> {
    let specs: Vec<_> = layout
        .aggregations()
        .iter()
        .map(|a| a.spec.clone())
        .collect();
    let mut outcome = UpdateOutcome::default();
    let mut pending: Vec<(&EntityEvents, Start)> = entities
        .iter()
        .map(|e| {
            let start = cache.take(&e.key).map_or(Start::Guess, Start::Copy);
            (e, start)
        })
        .collect();
    let mut first_round = true;
    while !pending.is_empty() {
        let started = Instant::now();
        let mut writes = Vec::with_capacity(pending.len());
        let mut written = Vec::with_capacity(pending.len());
        for (entity, start) in pending {
            let fields = match &start {
                Start::Copy(copy) => {
                    [&copy.version, &copy.positions, &copy.tiles].map(|f| Some(f.as_slice()))
                }
                Start::Found(found) => found.each_ref().map(Option::as_deref),
                Start::Guess => [None; 3],
            };
            let (version, mut positions, mut tiles) = match stored(layout, &entity.key, fields) {
                Ok(stored) => stored,
                Err((version, e)) => {
                    tracing::error!(error = %e, "stored tiles are unreadable; the entity starts from empty tiles");
                    outcome.unreadable += 1;
                    let empty = vec![Tiles::default(); specs.len()];
                    (version, AppliedPositions::default(), empty)
                }
            };
            let applied = positions.apply_new(
                &specs,
                &mut tiles,
                entity
                    .messages
                    .iter()
                    .map(|m| (&*m.stream, m.offset, m.events.as_slice())),
            );
            if applied.applied + applied.late == 0 {
                // Every event is held already: nothing to write.
                outcome.events.already_held += applied.already_held;
                if let Start::Copy(copy) = start {
                    cache.put(entity.key.clone(), copy);
                }
                continue;
            }
            for (spec, tiles) in specs.iter().zip(tiles.iter_mut()) {
                tiles.evict(spec, now);
            }
            writes.push(EntityWrite {
                key: entity.key.as_str(),
                read_version: version,
                written: Written {
                    version: cache.next_version(),
                    positions: encode_positions(&positions),
                    tiles: layout.encode(&tiles),
                },
            });
            written.push((entity, applied, matches!(start, Start::Guess)));
        }
        let per_call = if connection.is_cluster() {
            1
        } else {
            ENTITIES_PER_CALL
        };
        let calls: Vec<Cmd> = writes
            .chunks(per_call)
            .map(|chunk| write_command(script, expiry_ms, chunk))
            .collect();
        let applying = started.elapsed();
        let answers: Vec<Vec<Value>> = connection.invoke_all_replies(script, &calls).await?;
        if first_round {
            outcome.phases.apply += applying;
            outcome.phases.write += started.elapsed() - applying;
        } else {
            *outcome.phases.redo.get_or_insert_default() += started.elapsed();
        }
        let answers: Vec<Value> = answers.into_iter().flatten().collect();
        if answers.len() != writes.len() {
            return Err(UpdateError::Answer(format!(
                "{} results for {} entities",
                answers.len(),
                writes.len()
            )));
        }
        let mut again = Vec::new();
        for (((entity, applied, guessed), answer), write) in
            written.into_iter().zip(answers).zip(writes)
        {
            match answer {
                Value::Int(1) => {
                    cache.put(entity.key.clone(), write.written);
                    outcome.events.applied += applied.applied;
                    outcome.events.late += applied.late;
                    outcome.events.already_held += applied.already_held;
                }
                Value::Array(found) => {
                    // The hash was not what the update started from: its counts are the
                    // next round's, from the hash as the script found it.
                    if guessed {
                        outcome.found_stored += 1;
                    } else {
                        outcome.conflicts += 1;
                    }
                    again.push((entity, Start::Found(found_fields(found)?)));
                }
                other => return Err(UpdateError::Answer(format!("{other:?}"))),
            }
        }
        pending = again;
        first_round = false;
    }
    Ok(outcome)
}

/// The version, positions and tiles fields of a hash as the script found them.
fn found_fields(found: Vec<Value>) -> Result<[Option<Vec<u8>>; 3], UpdateError> {
    let field = |value: Option<Value>| match value {
        Some(Value::BulkString(bytes)) => Ok(Some(bytes)),
        Some(Value::Nil) | None => Ok(None),
        Some(other) => Err(UpdateError::Answer(format!("{other:?} as a field"))),
    };
    let mut found = found.into_iter();
    Ok([
        field(found.next())?,
        field(found.next())?,
        field(found.next())?,
    ])
}

/// An entity's version, positions and tiles.
type Stored = (Vec<u8>, AppliedPositions<Offset>, Vec<Tiles>);

/// The version, positions and tiles an entity's hash holds (its `_v`, `_p` and `_t`
/// fields); on unreadable bytes, the version (to overwrite them) and why.
fn stored(
    layout: &TileLayout,
    key: &str,
    [version, positions, tiles]: [Option<&[u8]>; 3],
) -> Result<Stored, (Vec<u8>, TileError)> {
    let version = version.map(<[u8]>::to_vec).unwrap_or_default();
    let positions = match positions {
        Some(bytes) => decode_positions(key, bytes).map_err(|e| (version.clone(), e))?,
        None => AppliedPositions::default(),
    };
    let tiles = layout
        .decode(key, tiles)
        .map_err(|e| (version.clone(), e))?;
    Ok((version, positions, tiles))
}

/// An entity's update: its hash, the version it started from, and what to write.
struct EntityWrite<'a> {
    key: &'a str,
    read_version: Vec<u8>,
    written: Written,
}

/// The script call writing the entities of `writes` whose version is still the one their
/// update started from.
fn write_command(script: &Script, expiry_ms: i64, writes: &[EntityWrite<'_>]) -> Cmd {
    let mut call = redis::cmd("EVALSHA");
    call.arg(script.get_hash()).arg(writes.len());
    for write in writes {
        call.arg(write.key);
    }
    call.arg(expiry_ms.max(0));
    for write in writes {
        let written = &write.written;
        call.arg(&write.read_version)
            .arg(&written.version)
            .arg(&written.positions)
            .arg(&written.tiles);
    }
    call
}
