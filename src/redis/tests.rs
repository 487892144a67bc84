//! The redis module's files together: the latest-wins script (`writer.rs`) fed by the script
//! calls (`calls.rs`) against a real Redis (`REDIS_URL`; skipped without it), equal event
//! times with and without tie-breaking (`ties.rs`).

use std::collections::HashMap;

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script};

use super::calls::ScriptCalls;
use super::entity_write::EntityWrites;
use super::writer::LATEST_WINS_LUA;

const EAST_LATE: &[u8] = b"00000001792000000200:east";
const WEST_EARLY: &[u8] = b"00000001792000000100:west";
/// Same publish time as `EAST_LATE`: the cluster name decides.
const WEST_LATE: &[u8] = b"00000001792000000200:west";

async fn connection() -> Option<MultiplexedConnection> {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("REDIS_URL is not set: skipping the real-Redis script test");
        return None;
    };
    let client = redis::Client::open(url).expect("REDIS_URL");
    Some(
        client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to REDIS_URL"),
    )
}

/// One entity per call: `(key, event time, tie, value of field f or None for a null f)`.
async fn write(
    connection: &mut MultiplexedConnection,
    tie_field: Option<&[u8]>,
    (key, at, tie, value): (&str, i64, &[u8], Option<&str>),
) -> i64 {
    let script = Script::new(LATEST_WINS_LUA);
    let mut calls = ScriptCalls::new(&script, 60_000, (b"_ts", "ms"), tie_field, false);
    calls.entity(
        key.as_bytes(),
        at,
        at.to_string().as_bytes(),
        Some(tie),
        usize::from(value.is_some()),
    );
    match value {
        Some(value) => calls.set(b"f", value.as_bytes()),
        None => calls.delete(b"f"),
    }
    let commands = calls.into_commands();
    script.load_async(connection).await.expect("SCRIPT LOAD");
    commands[0]
        .query_async::<i64>(connection)
        .await
        .expect("EVALSHA")
}

async fn stored(connection: &mut MultiplexedConnection, key: &str) -> HashMap<String, String> {
    connection.hgetall(key).await.expect("HGETALL")
}

fn fields(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

#[tokio::test]
async fn equal_event_times_go_to_the_greater_tie_value_in_either_order() {
    let Some(mut redis) = connection().await else {
        return;
    };
    let prefix = format!("ties-test:{}", std::process::id());
    let ties = Some(&b"_tie"[..]);
    for (winner, loser) in [(EAST_LATE, WEST_EARLY), (WEST_LATE, EAST_LATE)] {
        let (win, lose) = (text(winner), text(loser));
        let first = format!("{prefix}:{win}:first");
        let last = format!("{prefix}:{win}:last");
        // The winner first, then the loser: the loser is not written.
        assert_eq!(
            write(&mut redis, ties, (&first, 50, winner, Some(win))).await,
            1
        );
        assert_eq!(
            write(&mut redis, ties, (&first, 50, loser, Some(lose))).await,
            0
        );
        // The loser first: the winner overwrites it.
        assert_eq!(
            write(&mut redis, ties, (&last, 50, loser, Some(lose))).await,
            1
        );
        assert_eq!(
            write(&mut redis, ties, (&last, 50, winner, Some(win))).await,
            1
        );
        let expected = fields(&[("_ts", "50"), ("_tie", win), ("f", win)]);
        assert_eq!(stored(&mut redis, &first).await, expected);
        assert_eq!(stored(&mut redis, &last).await, expected);
    }

    let key = format!("{prefix}:rules");
    // An equal tie value (one region, one origin): the later write wins.
    write(&mut redis, ties, (&key, 50, EAST_LATE, Some("one"))).await;
    assert_eq!(
        write(&mut redis, ties, (&key, 50, EAST_LATE, Some("two"))).await,
        1
    );
    // Event time still comes first: an older event loses whatever its tie value, a newer
    // one wins whatever its tie value; a null feature is deleted as without ties.
    assert_eq!(
        write(&mut redis, ties, (&key, 40, WEST_LATE, Some("old"))).await,
        0
    );
    assert_eq!(
        write(&mut redis, ties, (&key, 60, WEST_EARLY, None)).await,
        1
    );
    let expected = fields(&[("_ts", "60"), ("_tie", text(WEST_EARLY))]);
    assert_eq!(stored(&mut redis, &key).await, expected);

    // An entity written without a tie value loses the tie.
    let key = format!("{prefix}:untied");
    write(&mut redis, None, (&key, 50, EAST_LATE, Some("untied"))).await;
    assert_eq!(
        write(&mut redis, ties, (&key, 50, WEST_EARLY, Some("tied"))).await,
        1
    );
    let expected = fields(&[("_ts", "50"), ("_tie", text(WEST_EARLY)), ("f", "tied")]);
    assert_eq!(stored(&mut redis, &key).await, expected);
}

#[tokio::test]
async fn without_ties_the_later_write_wins_and_no_tie_field_is_stored() {
    let Some(mut redis) = connection().await else {
        return;
    };
    let prefix = format!("ties-test:{}:off", std::process::id());
    for (first, second) in [(EAST_LATE, WEST_EARLY), (WEST_EARLY, EAST_LATE)] {
        let key = format!("{prefix}:{}", text(first));
        write(&mut redis, None, (&key, 50, first, Some("first"))).await;
        assert_eq!(
            write(&mut redis, None, (&key, 50, second, Some("second"))).await,
            1
        );
        let expected = fields(&[("_ts", "50"), ("f", "second")]);
        assert_eq!(stored(&mut redis, &key).await, expected);
    }
}

#[tokio::test]
async fn with_ties_call_fields_pairs_and_entities_without_features_all_write() {
    let Some(mut redis) = connection().await else {
        return;
    };
    let prefix = format!("ties-test:{}:shapes", std::process::id());
    let script = Script::new(LATEST_WINS_LUA);
    for tie_field in [None, Some(&b"_tie"[..])] {
        let key = |n: &str| format!("{prefix}:{}:{n}", tie_field.is_some());
        let mut calls = ScriptCalls::new(&script, 60_000, (b"_ts", "ms"), tie_field, false);
        // No feature set: the call's fields are none, so every entity below that sets
        // none sends values only (the -1 path), the others pairs.
        calls.entity(key("a").as_bytes(), 10, b"10", Some(EAST_LATE), 0);
        calls.entity(key("b").as_bytes(), 10, b"10", Some(EAST_LATE), 2);
        calls.set(b"f", b"1");
        calls.set(b"g", b"2");
        calls.entity(key("c").as_bytes(), 10, b"10", Some(EAST_LATE), 0);
        script.load_async(&mut redis).await.expect("SCRIPT LOAD");
        let written: i64 = calls.into_commands()[0]
            .query_async(&mut redis)
            .await
            .expect("EVALSHA");
        assert_eq!(written, 3);
        let tie: &[(&str, &str)] = match tie_field {
            Some(_) => &[("_tie", text(EAST_LATE))],
            None => &[],
        };
        let with = |extra: &[(&str, &str)]| {
            let mut all = vec![("_ts", "10")];
            all.extend_from_slice(tie);
            all.extend_from_slice(extra);
            fields(&all)
        };
        assert_eq!(stored(&mut redis, &key("a")).await, with(&[]));
        assert_eq!(
            stored(&mut redis, &key("b")).await,
            with(&[("f", "1"), ("g", "2")])
        );
        assert_eq!(stored(&mut redis, &key("c")).await, with(&[]));
    }
}
