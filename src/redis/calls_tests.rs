//! The script calls' argument layout, with and without ties.

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
