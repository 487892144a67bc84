//! Applying a batch's events to the entities' tiles: read the tiles and positions (or take
//! the copy this sink last wrote, [`TileCache`]), apply in the process what they do not hold
//! yet, and write back only if no one else updated the entity meanwhile (a replica during a
//! partition hand-over); an entity that lost the race is read and applied again. Each
//! entity's update is atomic, so its tiles and positions always agree, and a replay of any
//! part of a stream is harmless.

use std::time::{Duration, Instant};

use redis::{Cmd, Script};

use super::cache::{TileCache, Written};
use super::events::EntityEvents;
use super::layout::{
    decode_positions, encode_positions, TileError, TileLayout, POSITIONS_FIELD, TILES_FIELD,
    VERSION_FIELD,
};
use crate::aggregate::{AppliedPositions, ReplayOutcome, Tiles};
use crate::redis::RedisConnection;
use crate::source::Offset;

/// Writes each entity's tiles if its version is still the one read, atomically per call.
/// KEYS: the entities' hashes; ARGV[1] the expiry in ms (0: none), then per key the version
/// read (`''`: none), the version to write, the positions and the tiles. Returns per key 1
/// when written, 0 when the version had changed.
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
    out[k] = 0
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
}

/// What a batch's update did, over its entities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// Events applied, already held, late.
    pub events: ReplayOutcome,
    /// Entity updates that found another writer's update first and were done again.
    pub conflicts: usize,
    /// Entities whose stored tiles could not be read: they start from empty tiles.
    pub unreadable: usize,
    /// Time spent waiting for reads (`None`: nothing was read), applying in the process,
    /// and waiting for the writes.
    pub phases: UpdatePhases,
}

/// Where an update's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdatePhases {
    /// The tiles' reads (`None`: every entity started from a copy).
    pub read: Option<Duration>,
    /// Decoding, applying and encoding in the process.
    pub apply: Duration,
    /// The script calls.
    pub write: Duration,
}

/// Applies `entities`' events to their tiles at time `now` (ms since 1970: tiles no later
/// read covers are dropped), keeping each hash `expiry_ms` after the update. An entity whose
/// copy `cache` keeps is not read first; the written hashes are kept there.
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
    let mut pending: Vec<&EntityEvents> = entities.iter().collect();
    // A copy is trusted in the first round only: an entity that lost the race is read.
    let mut first_round = true;
    while !pending.is_empty() {
        let copies: Vec<Option<Written>> = pending
            .iter()
            .map(|e| first_round.then(|| cache.take(&e.key)).flatten())
            .collect();
        let reads: Vec<Cmd> = pending
            .iter()
            .zip(&copies)
            .filter(|(_, copy)| copy.is_none())
            .map(|(e, _)| read_command(&e.key))
            .collect();
        let started = Instant::now();
        let mut replies = if reads.is_empty() {
            Vec::new()
        } else {
            let replies = connection.query_all::<Vec<Option<Vec<u8>>>>(reads).await?;
            *outcome.phases.read.get_or_insert_default() += started.elapsed();
            replies
        }
        .into_iter();
        let started = Instant::now();
        let mut writes = Vec::with_capacity(pending.len());
        let mut written = Vec::with_capacity(pending.len());
        for (entity, copy) in pending.iter().zip(copies) {
            let reply = match copy {
                Some(_) => Vec::new(),
                None => replies.next().unwrap_or_default(),
            };
            let fields = match &copy {
                Some(copy) => {
                    [&copy.version, &copy.positions, &copy.tiles].map(|f| Some(f.as_slice()))
                }
                None => {
                    let mut read = reply.iter().map(Option::as_deref);
                    [(); 3].map(|()| read.next().flatten())
                }
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
                if let Some(copy) = copy {
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
            written.push((*entity, applied));
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
        outcome.phases.apply += started.elapsed();
        let started = Instant::now();
        let answers: Vec<Vec<i64>> = connection.invoke_all_replies(script, &calls).await?;
        outcome.phases.write += started.elapsed();
        let answers: Vec<i64> = answers.into_iter().flatten().collect();
        let mut lost = Vec::new();
        for (((entity, applied), answer), write) in written.into_iter().zip(answers).zip(writes) {
            if answer == 0 {
                // Another writer updated it since the read: its counts are the next round's.
                cache.remove(&entity.key);
                lost.push(entity);
            } else {
                cache.put(entity.key.clone(), write.written);
                outcome.events.applied += applied.applied;
                outcome.events.late += applied.late;
                outcome.events.already_held += applied.already_held;
            }
        }
        outcome.conflicts += lost.len();
        pending = lost;
        first_round = false;
    }
    Ok(outcome)
}

/// An entity's version, positions and tiles.
type Stored = (Vec<u8>, AppliedPositions<Offset>, Vec<Tiles>);

/// The version, positions and tiles an entity's hash holds (its fields, as
/// [`read_command`] reads them); on unreadable bytes, the version (to overwrite them) and
/// why.
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

/// `HMGET` of the version, the positions and the tiles.
fn read_command(key: &str) -> Cmd {
    let mut command = redis::cmd("HMGET");
    command
        .arg(key)
        .arg(VERSION_FIELD)
        .arg(POSITIONS_FIELD)
        .arg(TILES_FIELD);
    command
}

/// An entity's update: its hash, the version read, and what to write.
struct EntityWrite<'a> {
    key: &'a str,
    read_version: Vec<u8>,
    written: Written,
}

/// The script call writing the entities of `writes` whose version is still the one read.
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
