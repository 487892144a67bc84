//! The rollover's rules on in-memory batches: rewinds, gaps, cuts and commit keys.

use std::collections::HashSet;
use std::sync::Arc;

use super::*;
use arrow::array::Int64Array;

fn position(partition: &str, entry: u64) -> MessagePosition {
    MessagePosition {
        topic: partition.into(),
        offset: (7, entry, -1),
        entry_size: None,
        origin: None,
    }
}

/// One row per message, the row's value its entry id.
fn batch(
    partition: &str,
    entries: std::ops::Range<u64>,
) -> (RecordBatch, Vec<usize>, Vec<MessagePosition>) {
    let positions: Vec<MessagePosition> = entries.clone().map(|e| position(partition, e)).collect();
    let rows = RecordBatch::try_from_iter(vec![(
        "entry",
        Arc::new(Int64Array::from_iter_values(entries.map(|e| e as i64))) as _,
    )])
    .unwrap();
    (rows, (0..positions.len()).collect(), positions)
}

fn entries(rollover: &Rollover) -> Vec<i64> {
    rollover
        .row_batches()
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect()
}

#[test]
fn a_rewind_drops_what_comes_again() {
    let mut rollover = Rollover::default();
    let (rows, index, positions) = batch("p", 10..20);
    rollover.take(rows, index, positions).unwrap();
    // The broker dispatched 30..33 ahead, then rewound to 15.
    let (rows, index, positions) = batch("p", 30..33);
    rollover.take(rows, index, positions).unwrap();
    let (rows, index, positions) = batch("p", 15..18);
    assert_eq!(rollover.take(rows, index, positions).unwrap(), 8);
    assert_eq!(entries(&rollover), (10..18).collect::<Vec<_>>());
    assert_eq!(rollover.messages(), 8);
}

#[test]
fn a_rewind_after_in_order_runs_of_other_partitions_in_one_batch() {
    let mut rollover = Rollover::default();
    let (rows, index, positions) = batch("p", 10..20);
    rollover.take(rows, index, positions).unwrap();
    // q and p continue, then p rewinds to 15 within the same batch.
    let messages = [
        ("q", 1),
        ("q", 2),
        ("p", 20),
        ("p", 21),
        ("p", 15),
        ("p", 16),
    ];
    let positions: Vec<MessagePosition> = messages.iter().map(|(p, e)| position(p, *e)).collect();
    let rows = RecordBatch::try_from_iter(vec![(
        "entry",
        Arc::new(Int64Array::from_iter_values(
            messages.iter().map(|(_, e)| *e as i64),
        )) as _,
    )])
    .unwrap();
    let rewound = rollover
        .take(rows, (0..positions.len()).collect(), positions)
        .unwrap();
    assert_eq!(rewound, 7, "p 15..=19 buffered and p 20, 21 of the batch");
    assert_eq!(entries(&rollover), vec![10, 11, 12, 13, 14, 1, 2, 15, 16]);
    assert_eq!(rollover.partitions().len(), 2);
    // The next batch continues from 16.
    let (rows, index, positions) = batch("p", 17..19);
    assert_eq!(rollover.take(rows, index, positions).unwrap(), 0);
    assert_eq!(rollover.messages(), 11);
}

#[test]
fn a_commit_takes_only_the_run_that_continues_from_the_table() {
    let mut held = CommittedPositions::default();
    held.set("p", Some((7, 9, -1)));
    held.set("q", Some((7, 4, -1)));
    let mut rollover = Rollover::default();
    for (partition, range) in [("p", 8..12), ("p", 14..16), ("q", 5..7)] {
        let (rows, index, positions) = batch(partition, range);
        rollover.take(rows, index, positions).unwrap();
    }
    rollover.drop_held(&held).unwrap();
    let (cuts, accepted) =
        rollover.cuts(&held, std::time::Duration::from_secs(60), &HashSet::new());
    assert!(accepted.is_empty());
    assert_eq!(cuts.get("p"), Some(&(7, 11, i32::MAX)));
    assert_eq!(cuts.get("q"), Some(&(7, 6, i32::MAX)));
    let taken = rollover.split(&cuts).unwrap();
    assert_eq!(entries(&taken), vec![10, 11, 5, 6]);
    assert_eq!(
        taken.messages(),
        6,
        "8 and 9 are acknowledged with the rest"
    );
    assert_eq!(
        entries(&rollover),
        vec![14, 15],
        "after the gap: kept for later"
    );
    // A gap that lasts is accepted.
    let (cuts, accepted) = rollover.cuts(&held, std::time::Duration::ZERO, &HashSet::new());
    assert_eq!(accepted.len(), 1);
    assert!(cuts.contains_key("p"));
}

#[test]
fn commit_keys_stand_for_whole_entries() {
    let mut rollover = Rollover::default();
    let (rows, index, positions) = batch("p", 3..5);
    rollover.take(rows, index, positions).unwrap();
    assert_eq!(rollover.commit_keys().get("p"), Some(&(7, 4, i32::MAX)));
}

#[test]
fn a_bridged_gap_is_taken_at_once_and_an_unbridged_one_still_waits() {
    let mut held = CommittedPositions::default();
    held.set("p", Some((7, 9, i32::MAX)));
    let mut rollover = Rollover::default();
    // 10..12, then 14..16 (13 a marker the broker skipped), then 18..20 (17 not skipped).
    for range in [10..12, 14..16, 18..20] {
        let (rows, index, positions) = batch("p", range);
        rollover.take(rows, index, positions).unwrap();
    }
    let gaps = rollover.gaps(&held);
    let gap = |at, next| ("p".to_string(), (7, at, i32::MAX), (7, next, -1));
    assert_eq!(gaps, vec![gap(11, 14), gap(15, 18)]);
    let grace = std::time::Duration::from_secs(60);
    let bridged: HashSet<AcceptedGap> = [gap(11, 14)].into_iter().collect();
    let (cuts, accepted) = rollover.cuts(&held, grace, &bridged);
    assert!(accepted.is_empty());
    assert_eq!(cuts.get("p"), Some(&(7, 15, i32::MAX)), "past 13, up to 17");
    let taken = rollover.split(&cuts).unwrap();
    assert_eq!(entries(&taken), vec![10, 11, 14, 15]);
    assert_eq!(entries(&rollover), vec![18, 19], "waits for 17");
    // Once the table holds 15, the gap before 18 is the first; without a bridge it waits.
    held.set("p", Some((7, 15, i32::MAX)));
    let (cuts, accepted) = rollover.cuts(&held, grace, &bridged);
    assert!(accepted.is_empty());
    assert_eq!(
        cuts.get("p"),
        Some(&(7, 15, i32::MAX)),
        "no further than held"
    );
    assert_eq!(rollover.split(&cuts).unwrap().messages(), 0);
    assert_eq!(entries(&rollover), vec![18, 19]);
}
