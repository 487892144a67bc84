//! The offline sink on the in-memory object store: rollover by rows, one commit per rollover,
//! redelivered messages skipped and still acknowledged, positions recovered from the log.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::delta::{DeltaSinkBuilder, DeltaSinkConfig, ObjectStoreServiceConfig};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::record::{RowBatch, RowLayout};
use crate::sink::{SinkContext, SinkError};

const PARTITION: &str = "persistent://public/default/t-partition-0";

fn context() -> SinkContext {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("v", DataType::Float64, true),
    ]));
    SinkContext {
        pipeline: "p".into(),
        rows: RowLayout {
            keys: vec!["id".into()],
            event_time: "ts".into(),
            features: vec!["v".into()],
        },
        output_schema: schema,
        schema_fingerprint: "test".into(),
        root: std::env::temp_dir(),
        metrics: Arc::new(Metrics::new()),
        health: Arc::new(Health::default()),
        cancel: CancellationToken::new(),
        offline_origins: Default::default(),
        tie_break: false,
    }
}

fn builder(rollover_rows: usize) -> DeltaSinkBuilder {
    builder_with(&format!("rollover_rows: {rollover_rows}\n"))
}

/// A builder on the in-memory store with these extra `offline` keys.
fn builder_with(keys: &str) -> DeltaSinkBuilder {
    let config: DeltaSinkConfig =
        serde_saphyr::from_str(&format!("url: memory:///tables\n{keys}")).unwrap();
    let service: ObjectStoreServiceConfig =
        serde_saphyr::from_str("default_url: memory:///tables\n").unwrap();
    DeltaSinkBuilder {
        service,
        config,
        gap_grace: None,
    }
}

/// Messages `entries` of the partition, one row each (entity `e{entry}`, event time = entry).
fn batch(entries: std::ops::RangeInclusive<u64>, schema: &arrow::datatypes::SchemaRef) -> RowBatch {
    let entries: Vec<u64> = entries.collect();
    let ids: ArrayRef = Arc::new(StringArray::from_iter_values(
        entries.iter().map(|e| format!("e{e}")),
    ));
    let ts: ArrayRef = Arc::new(Int64Array::from_iter_values(
        entries.iter().map(|e| 1_700_000_000_000 + *e as i64),
    ));
    let v: ArrayRef = Arc::new(Float64Array::from_iter_values(
        entries.iter().map(|e| *e as f64),
    ));
    RowBatch {
        rows: RecordBatch::try_new(schema.clone(), vec![ids, ts, v]).unwrap(),
        positions: entries
            .iter()
            .map(|e| MessagePosition {
                topic: PARTITION.into(),
                offset: (3, *e, -1),
                entry_size: None,
                origin: None,
            })
            .collect(),
        row_positions: (0..entries.len()).collect(),
        publish_times_ms: entries.iter().map(|e| 1_700_000_000_000 + e).collect(),
    }
}

fn entries(durable: &[MessagePosition]) -> Vec<u64> {
    durable.iter().map(|p| p.offset.1).collect()
}

async fn sink_on(spec: &TableSpec, builder: &DeltaSinkBuilder) -> DeltaSink {
    let (table, _) = spec.open().await.unwrap();
    DeltaSink::new(
        spec.clone(),
        builder.config.clone(),
        Some(table),
        CancellationToken::new(),
    )
}

/// A started sink on a new table of `builder`'s, and the table's spec.
async fn started_sink(
    builder: &DeltaSinkBuilder,
    context: &SinkContext,
) -> Result<(TableSpec, DeltaSink), SinkError> {
    let spec = builder.table_spec(context)?;
    let mut sink = sink_on(&spec, builder).await;
    sink.start().await?;
    Ok((spec, sink))
}

#[tokio::test]
async fn a_rollover_is_one_commit_and_acknowledges_its_messages_in_order() -> Result<(), SinkError>
{
    let context = context();
    let (spec, mut sink) = started_sink(&builder(4), &context).await?;
    assert!(sink
        .write(batch(0..=2, &context.output_schema))
        .await?
        .is_empty());
    assert_eq!(sink.pending_rows(), 3);
    let durable = sink.write(batch(3..=4, &context.output_schema)).await?;
    assert_eq!(entries(&durable), vec![0, 1, 2, 3, 4]);
    assert_eq!(sink.pending_rows(), 0);
    let (table, _) = spec.open().await.unwrap();
    assert_eq!(table.version(), 1, "created at 0, one rollover commit");
    let files = table.active_files().await.unwrap();
    assert_eq!(files.len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_new_sink_skips_what_the_log_holds_and_still_acknowledges_it() -> Result<(), SinkError> {
    let context = context();
    let builder = builder(2);
    let spec = builder.table_spec(&context)?;
    let mut first = sink_on(&spec, &builder).await;
    first.start().await?;
    let durable = first.write(batch(0..=3, &context.output_schema)).await?;
    assert_eq!(entries(&durable), vec![0, 1, 2, 3]);

    // A restart: the position comes back from the log, the redelivered messages are
    // acknowledged without a commit, and the new ones are committed.
    let mut second = sink_on(&spec, &builder).await;
    second.start().await?;
    let redelivered = second.write(batch(2..=5, &context.output_schema)).await?;
    let mut acknowledged = entries(&redelivered);
    acknowledged.extend(entries(&second.flush().await?));
    acknowledged.sort_unstable();
    acknowledged.dedup();
    assert_eq!(acknowledged, vec![2, 3, 4, 5]);
    let (table, _) = spec.open().await.unwrap();
    assert_eq!(
        table.version(),
        2,
        "one more commit, for entries 4 and 5 only"
    );
    let rows: usize = table
        .active_files()
        .await
        .unwrap()
        .iter()
        .map(|f| f.rows.unwrap_or(0))
        .sum();
    assert_eq!(rows, 6);
    Ok(())
}

#[test]
fn an_idle_rollover_commits_early_only_when_it_holds_a_tenth_of_rollover_rows() {
    use std::time::Duration;
    let quiet = Duration::from_millis(300);
    let idle = Duration::from_millis(200);
    assert!(
        idle_commit_due(5_000, 50_000, quiet, idle),
        "a tenth, quiet long enough"
    );
    assert!(
        !idle_commit_due(4_999, 50_000, quiet, idle),
        "a trickle waits for the interval"
    );
    assert!(
        !idle_commit_due(5_000, 50_000, Duration::from_millis(100), idle),
        "rows still coming"
    );
    assert!(
        !idle_commit_due(5_000, 50_000, quiet, Duration::ZERO),
        "0s turns it off"
    );
    assert!(!idle_commit_due(0, 5, quiet, idle), "nothing to commit");
    assert!(
        idle_commit_due(1, 5, quiet, idle),
        "a tenth of 5 rounds down to 0: any row"
    );
}

#[tokio::test]
async fn a_tick_after_the_rows_stop_commits_without_waiting_for_the_interval(
) -> Result<(), SinkError> {
    let context = context();
    let builder = builder_with("rollover_rows: 100\nrollover_interval: 1h\nidle_commit: 50ms\n");
    let (spec, mut sink) = started_sink(&builder, &context).await?;
    assert!(sink
        .write(batch(0..=9, &context.output_schema))
        .await?
        .is_empty());
    assert!(sink.tick().await?.is_empty(), "the rows have just come");
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    let durable = sink.tick().await?;
    assert_eq!(entries(&durable), (0..=9).collect::<Vec<_>>());
    let (table, _) = spec.open().await.unwrap();
    assert_eq!(table.version(), 1, "created at 0, one idle commit");

    let builder = builder_with("rollover_rows: 100\nrollover_interval: 1h\nidle_commit: 0s\n");
    let (_, mut off) = started_sink(&builder, &context).await?;
    assert!(off
        .write(batch(10..=19, &context.output_schema))
        .await?
        .is_empty());
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    assert!(
        off.tick().await?.is_empty(),
        "0s: only the interval or the size commit"
    );
    assert_eq!(off.pending_rows(), 10);
    Ok(())
}

/// A source that skipped exactly `entries` itself.
struct Skipped(Vec<u64>);

#[async_trait]
impl SkippedEntries for Skipped {
    async fn skipped(
        &self,
        _stream: &str,
        gaps: &[(crate::source::Offset, crate::source::Offset)],
    ) -> Result<Vec<bool>, crate::source::SkippedEntriesError> {
        Ok(gaps
            .iter()
            .map(|(after, before)| (after.1 + 1..before.1).all(|e| self.0.contains(&e)))
            .collect())
    }

    async fn done_before(
        &self,
        _stream: &str,
        first: crate::source::Offset,
    ) -> Result<bool, crate::source::SkippedEntriesError> {
        Ok((0..first.1).all(|e| self.0.contains(&e)))
    }
}

#[tokio::test]
async fn a_gap_the_source_skipped_is_committed_past_at_once() -> Result<(), SinkError> {
    let context = context();
    let (_, mut sink) = started_sink(&builder(2), &context).await?;
    let durable = sink.write(batch(0..=1, &context.output_schema)).await?;
    assert_eq!(entries(&durable), vec![0, 1]);
    // Entries 2 and 3 never come: with no probe, or one that did not skip them, 4 and 5 wait.
    assert!(sink
        .write(batch(4..=5, &context.output_schema))
        .await?
        .is_empty());
    sink.set_skipped_entries(Arc::new(Skipped(vec![2])));
    assert!(sink.commit().await?.is_empty(), "3 was not skipped");
    // Once the source says it skipped them, the next commit takes 4 and 5 without waiting.
    sink.set_skipped_entries(Arc::new(Skipped(vec![2, 3])));
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(entries(&sink.commit().await?), vec![4, 5]);
    assert_eq!(sink.pending_rows(), 0);
    Ok(())
}

/// The rollover's rules on in-memory batches: rewinds, gaps, cuts and commit keys.
mod rollover_rules {
    use std::collections::HashSet;
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};

    use super::super::gaps::AcceptedGap;
    use super::super::rollover::Rollover;
    use crate::delta::CommittedPositions;
    use crate::source::MessagePosition;

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
        let positions: Vec<MessagePosition> =
            entries.clone().map(|e| position(partition, e)).collect();
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
        let positions: Vec<MessagePosition> =
            messages.iter().map(|(p, e)| position(p, *e)).collect();
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
}
