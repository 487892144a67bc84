//! The tiles of one hop of one aggregation as bytes, compact enough that an entity's tiles
//! fit in a few KB of an online store: tile starts as varint steps of the hop, counts and
//! integers as (zigzag) varints, floats as 8 bytes and their rounding compensation only
//! when there is one.

use std::collections::BTreeMap;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{decode_varint, encode_varint};

use super::function::{Datum, Function, State};
use super::sketch::{Sketch, MAX_RANK, REGISTERS, SPARSE_LIMIT};

/// Stored tiles that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The bytes end inside a value, or a varint is malformed.
    #[error("stored tiles are cut short or malformed: {0}")]
    Malformed(String),
    /// A tag names no known value kind.
    #[error("stored tiles hold an unknown value tag {0}")]
    UnknownTag(u8),
}

/// The layout's version, first byte of every encoding.
const VERSION: u8 = 1;

/// Encodes the tiles of one hop (`tile start → state`, all states of one aggregation).
pub fn encode_tiles(hop_ms: i64, tiles: &BTreeMap<i64, State>) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + tiles.len() * 4);
    out.put_u8(VERSION);
    encode_varint(tiles.len() as u64, &mut out);
    let mut previous: Option<i64> = None;
    for (&start, state) in tiles {
        let index = start.div_euclid(hop_ms);
        match previous {
            None => encode_varint(zigzag(index), &mut out),
            Some(p) => encode_varint(index.abs_diff(p), &mut out),
        }
        previous = Some(index);
        encode_state(state, &mut out);
    }
    out
}

/// Decodes what [`encode_tiles`] wrote for the same hop, for an aggregation with the
/// same function (the online store names its fields by function, so that a changed
/// definition starts from empty tiles rather than misreading old ones).
pub fn decode_tiles(
    function: Function,
    hop_ms: i64,
    mut bytes: &[u8],
) -> Result<BTreeMap<i64, State>, CodecError> {
    let buf = &mut bytes;
    match take_u8(buf)? {
        VERSION => {}
        other => return Err(CodecError::UnknownTag(other)),
    }
    let count = varint(buf)?;
    let mut tiles = BTreeMap::new();
    let mut index: Option<i64> = None;
    for _ in 0..count {
        let next = match index {
            None => unzigzag(varint(buf)?),
            Some(p) => i64::try_from(varint(buf)?)
                .ok()
                .and_then(|step| p.checked_add(step))
                .ok_or_else(|| CodecError::Malformed("tile index out of range".into()))?,
        };
        index = Some(next);
        let start = next
            .checked_mul(hop_ms)
            .ok_or_else(|| CodecError::Malformed("tile start out of range".into()))?;
        tiles.insert(start, decode_state(function, buf)?);
    }
    if buf.has_remaining() {
        return Err(CodecError::Malformed("bytes after the last tile".into()));
    }
    Ok(tiles)
}

fn encode_state(state: &State, out: &mut Vec<u8>) {
    match state {
        State::Count(n) => encode_varint(*n, out),
        State::IntSum(sum) => {
            out.put_u8(INT);
            let z = ((sum << 1) ^ (sum >> 127)) as u128;
            encode_varint(z as u64, out);
            encode_varint((z >> 64) as u64, out);
        }
        State::FloatSum { sum, compensation } => encode_float_pair(*sum, *compensation, out),
        State::Avg {
            sum,
            compensation,
            count,
        } => {
            encode_float_pair(*sum, *compensation, out);
            encode_varint(*count, out);
        }
        State::IntExtreme(v) => encode_datum(&Datum::Int(*v), out),
        State::FloatExtreme(v) => encode_datum(&Datum::Float(*v), out),
        State::Newest(values) => {
            encode_varint(values.len() as u64, out);
            for ((event_time, tie_break), datum) in values {
                encode_varint(zigzag(*event_time), out);
                encode_varint(*tie_break, out);
                encode_datum(datum, out);
            }
        }
        State::Distinct(sketch) => encode_sketch(sketch, out),
    }
}

/// A sparse sketch: its tag, how many registers are set, then each one's index (the first
/// as it is, the others as the step from the one before) and value. A dense one: its tag
/// and every register's value.
fn encode_sketch(sketch: &Sketch, out: &mut Vec<u8>) {
    match sketch {
        Sketch::Sparse(set) => {
            out.put_u8(SPARSE);
            encode_varint(set.len() as u64, out);
            let mut previous = 0;
            for &(index, rank) in set {
                encode_varint(u64::from(index - previous), out);
                out.put_u8(rank);
                previous = index;
            }
        }
        Sketch::Dense(registers) => {
            out.put_u8(DENSE);
            out.extend_from_slice(registers);
        }
    }
}

fn decode_sketch(buf: &mut &[u8]) -> Result<Sketch, CodecError> {
    let bad = |what: &str| CodecError::Malformed(format!("a distinct-value sketch {what}"));
    let rank = |buf: &mut &[u8]| -> Result<u8, CodecError> {
        let rank = take_u8(buf)?;
        if rank > MAX_RANK {
            return Err(bad("has a register past its largest value"));
        }
        Ok(rank)
    };
    match take_u8(buf)? {
        SPARSE => {
            let len = varint(buf)?;
            if len > SPARSE_LIMIT as u64 {
                return Err(bad("holds more registers than a sparse one can"));
            }
            let mut set = Vec::with_capacity(len as usize);
            let mut index = 0u64;
            for at in 0..len {
                let step = varint(buf)?;
                index = index.saturating_add(step);
                if (at > 0 && step == 0) || index >= REGISTERS as u64 {
                    return Err(bad("has registers out of order or out of range"));
                }
                set.push((index as u16, rank(buf)?));
            }
            Ok(Sketch::Sparse(set))
        }
        DENSE => {
            let registers = (0..REGISTERS)
                .map(|_| rank(buf))
                .collect::<Result<Vec<u8>, CodecError>>()?;
            Ok(Sketch::Dense(registers.into_boxed_slice()))
        }
        other => Err(CodecError::UnknownTag(other)),
    }
}

fn decode_state(function: Function, buf: &mut &[u8]) -> Result<State, CodecError> {
    Ok(match function {
        Function::Count => State::Count(varint(buf)?),
        Function::Sum => match take_u8(buf)? {
            INT => {
                let low = u128::from(varint(buf)?);
                let high = u128::from(varint(buf)?);
                let z = low | (high << 64);
                State::IntSum(((z >> 1) as i128) ^ -((z & 1) as i128))
            }
            FLOAT => State::FloatSum {
                sum: take_f64(buf)?,
                compensation: 0.0,
            },
            FLOAT_COMPENSATED => State::FloatSum {
                sum: take_f64(buf)?,
                compensation: take_f64(buf)?,
            },
            other => return Err(CodecError::UnknownTag(other)),
        },
        Function::Avg => {
            let (sum, compensation) = decode_float_pair(buf)?;
            State::Avg {
                sum,
                compensation,
                count: varint(buf)?,
            }
        }
        Function::Min | Function::Max => match decode_datum(buf)? {
            Datum::Int(v) => State::IntExtreme(v),
            Datum::Float(v) => State::FloatExtreme(v),
            Datum::Text(_) => return Err(CodecError::UnknownTag(TEXT)),
            Datum::Bool(b) => return Err(CodecError::UnknownTag(if b { TRUE } else { FALSE })),
        },
        Function::LastK(k) => {
            let len = varint(buf)?;
            let mut values = Vec::new();
            for _ in 0..len {
                let event_time = unzigzag(varint(buf)?);
                let tie_break = varint(buf)?;
                values.push(((event_time, tie_break), decode_datum(buf)?));
            }
            // Tiles written when `k` was larger read as the newest `k`.
            values.truncate(k);
            State::Newest(values)
        }
        Function::ApproxDistinct => State::Distinct(decode_sketch(buf)?),
    })
}

const INT: u8 = 0;
const FLOAT: u8 = 1;
const TEXT: u8 = 2;
const FALSE: u8 = 3;
const TRUE: u8 = 4;
const FLOAT_COMPENSATED: u8 = 5;
const SPARSE: u8 = 6;
const DENSE: u8 = 7;

fn encode_float_pair(sum: f64, compensation: f64, out: &mut Vec<u8>) {
    if compensation == 0.0 {
        out.put_u8(FLOAT);
        out.put_f64_le(sum);
    } else {
        out.put_u8(FLOAT_COMPENSATED);
        out.put_f64_le(sum);
        out.put_f64_le(compensation);
    }
}

fn decode_float_pair(buf: &mut &[u8]) -> Result<(f64, f64), CodecError> {
    match take_u8(buf)? {
        FLOAT => Ok((take_f64(buf)?, 0.0)),
        FLOAT_COMPENSATED => Ok((take_f64(buf)?, take_f64(buf)?)),
        other => Err(CodecError::UnknownTag(other)),
    }
}

fn encode_datum(datum: &Datum, out: &mut Vec<u8>) {
    match datum {
        Datum::Int(i) => {
            out.put_u8(INT);
            encode_varint(zigzag(*i), out);
        }
        Datum::Float(f) => {
            out.put_u8(FLOAT);
            out.put_f64_le(*f);
        }
        Datum::Text(s) => {
            out.put_u8(TEXT);
            encode_varint(s.len() as u64, out);
            out.put_slice(s.as_bytes());
        }
        Datum::Bool(b) => out.put_u8(if *b { TRUE } else { FALSE }),
    }
}

fn decode_datum(buf: &mut &[u8]) -> Result<Datum, CodecError> {
    Ok(match take_u8(buf)? {
        INT => Datum::Int(unzigzag(varint(buf)?)),
        FLOAT => Datum::Float(take_f64(buf)?),
        TEXT => {
            let len = usize::try_from(varint(buf)?).unwrap_or(usize::MAX);
            if buf.remaining() < len {
                return Err(CodecError::Malformed("text cut short".into()));
            }
            let text = String::from_utf8(buf[..len].to_vec())
                .map_err(|e| CodecError::Malformed(e.to_string()))?;
            buf.advance(len);
            Datum::Text(text)
        }
        FALSE => Datum::Bool(false),
        TRUE => Datum::Bool(true),
        other => return Err(CodecError::UnknownTag(other)),
    })
}

fn varint(buf: &mut &[u8]) -> Result<u64, CodecError> {
    decode_varint(buf).map_err(|e| CodecError::Malformed(e.to_string()))
}

fn take_u8(buf: &mut &[u8]) -> Result<u8, CodecError> {
    if buf.has_remaining() {
        Ok(buf.get_u8())
    } else {
        Err(CodecError::Malformed("cut short".into()))
    }
}

fn take_f64(buf: &mut &[u8]) -> Result<f64, CodecError> {
    if buf.remaining() >= 8 {
        Ok(buf.get_f64_le())
    } else {
        Err(CodecError::Malformed("float cut short".into()))
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{AggregationSpec, Event, Tiles, Window};

    const MINUTE: i64 = 60_000;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;

    /// An entity with an event every 20 minutes for 31 days, through `function`.
    fn busy_entity(function: Function, value: impl Fn(i64) -> Datum) -> (AggregationSpec, Tiles) {
        let windows = [HOUR, DAY, 30 * DAY]
            .iter()
            .map(|&l| Window::new(l).expect("valid"))
            .collect();
        let spec = AggregationSpec::new(function, matches!(value(0), Datum::Float(_)), windows);
        let mut tiles = Tiles::default();
        for i in 0..(31 * DAY / (20 * MINUTE)) {
            let at = i * 20 * MINUTE - 3 * DAY;
            let event = Event {
                event_time: at,
                publish_time: at + 1_000,
                value: Some(value(i)),
                tie_break: u64::try_from(i).unwrap_or(0),
            };
            tiles.apply(&spec, &event);
            tiles.evict(&spec, at + 1_000);
        }
        (spec, tiles)
    }

    fn round_trip(function: Function, tiles: &Tiles) -> (Tiles, usize) {
        let mut bytes = 0;
        let decoded = tiles.hops().map(|(hop, by_start)| {
            let encoded = encode_tiles(hop, by_start);
            bytes += encoded.len();
            (hop, decode_tiles(function, hop, &encoded).expect("decodes"))
        });
        let decoded = Tiles::from_hops(decoded.collect::<Vec<_>>());
        (decoded, bytes)
    }

    #[test]
    fn tiles_read_back_as_written_and_stay_small() {
        let mut total = 0;
        let mut sizes = Vec::new();
        type Case = (Function, fn(i64) -> Datum);
        let cases: [Case; 7] = [
            (Function::Count, |_| Datum::Bool(true)),
            (Function::Sum, |i| Datum::Int(i * 37 % 1000 - 500)),
            (Function::Sum, |i| Datum::Float(i as f64 / 3.0)),
            (Function::Avg, |i| Datum::Float(i as f64 * 0.1)),
            (Function::Max, |i| Datum::Int(i % 977)),
            (Function::LastK(5), |i| {
                Datum::Text(format!("item-{}", i % 50))
            }),
            (Function::ApproxDistinct, |i| {
                Datum::Text(format!("merchant-{}", i % 40))
            }),
        ];
        for (function, value) in cases {
            let (spec, tiles) = busy_entity(function, value);
            let (decoded, bytes) = round_trip(function, &tiles);
            assert_eq!(decoded, tiles, "{}", function.name());
            for window in spec.windows() {
                let t = 28 * DAY;
                assert_eq!(decoded.read(&spec, window, t), tiles.read(&spec, window, t));
            }
            sizes.push(format!("{} {bytes}", function.name()));
            if function == Function::ApproxDistinct {
                // 40 values among the 72 events of each day: a daily tile's sketch holds
                // about 38 registers, 2 to 3 bytes each.
                assert!(bytes < 3_300, "{bytes} bytes: {sizes:?}");
            } else {
                total += bytes;
            }
        }
        // Six aggregations over 1h, 1d and 30d of an entity with an event every 20 minutes
        // (13 + 25 + 31 tiles each; last_k keeps 5 values per hop): about 2.7 KB of tiles.
        assert!(total < 3_000, "{total} bytes: {sizes:?}");
    }

    #[test]
    fn any_bytes_give_tiles_or_an_error_never_a_panic() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for len in 0..2_000 {
            let bytes: Vec<u8> = (0..len % 64)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state & 0xff) as u8
                })
                .collect();
            for function in [
                Function::Count,
                Function::Sum,
                Function::LastK(3),
                Function::ApproxDistinct,
            ] {
                let _ = decode_tiles(function, 300_000, &bytes);
            }
        }
        assert!(decode_tiles(Function::Count, 300_000, &[]).is_err());
        assert!(decode_tiles(Function::Count, 300_000, &[VERSION, 1]).is_err());
        // A sketch's registers out of order, or past the largest value, are refused.
        let sketch = |body: &[u8]| [&[VERSION, 1, 0, SPARSE][..], body].concat();
        let decode = |bytes: &[u8]| decode_tiles(Function::ApproxDistinct, 300_000, bytes);
        assert!(
            decode(&sketch(&[2, 5, 3, 0, 4])).is_err(),
            "the same register twice"
        );
        assert!(
            decode(&sketch(&[1, 5, MAX_RANK + 1])).is_err(),
            "a value too large"
        );
        assert!(
            decode(&sketch(&[1, 0x80, 0x40, 3])).is_err(),
            "a register past the last"
        );
        assert!(decode(&sketch(&[2, 5, 3, 1, 4])).is_ok());
    }
}
