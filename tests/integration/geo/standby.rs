//! Active/standby: region A's sidecar commits everything with a replicated subscription;
//! when it dies, region B's sidecar takes over from the position A's subscription had
//! replicated, skipping what A had already committed.

use std::time::Duration;

use super::*;

/// Events produced in region A while its sidecar runs (and dies), then in region B.
const IN_A: u64 = 20_000;
const IN_B: u64 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_from_the_replicated_position_without_duplicates() {
    let geo = TwoRegions::new(
        2,
        "    offline: all_regions\n    replicated_subscriptions: true\n",
    )
    .await;
    let (regions, topic) = (&geo.regions, &geo.topic);
    let (project_a, project_b) = (&geo.a, &geo.b);

    // The standby region's subscription exists, replicated, before the active one consumes
    // (a replicated subscription's position reaches only clusters where it exists).
    let request = feature_connector::tls::http_client()
        .put(format!(
            "{}?replicated=true",
            admin_url_at(&regions[1].admin, topic, "subscription/user_features")
        ))
        .header("content-type", "application/json")
        .body(r#"{"entryId": -1, "ledgerId": -1, "partitionIndex": -1}"#);
    admin_ok(request, "create the replicated subscription in region B").await;

    // Region A: its sidecar consumes a steady stream and is SIGKILLed in the middle of it.
    let active = project_a.start_with_env("run-a.log", &[]);
    let producer = produce(project_a, 0, IN_A, &["--rate", "4000"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    active.kill_hard();
    let log_a = std::fs::read_to_string(project_a.path().join("run-a.log")).expect("A's log");
    producer.join().expect("producer in A");

    // The subscription exists in region B at the position A's acknowledgements replicated
    // (snapshots every second), not at the start of the topic.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b_backlog = backlog_at(&regions[1].admin, topic, "user_features").await;
    assert!(
        b_backlog.is_some_and(|backlog| backlog < IN_A),
        "region B's replicated subscription: backlog {b_backlog:?} of {IN_A} events"
    );

    // Region B takes over; producers now write there too.
    let standby_sidecar = project_b.start_with_env("run-b.log", &[]);
    produce(project_b, IN_A, IN_B, &[])
        .join()
        .expect("producer in B");
    wait_drained_everywhere(
        &regions[1..],
        topic,
        "user_features",
        Duration::from_secs(120),
    )
    .await;
    let (code, log_b) = standby_sidecar.stop_with_log();
    assert_eq!(code, 0, "region B's sidecar stops cleanly");
    assert_quiet_but_broker_retries("region B's sidecar", &log_b);
    assert_quiet("region A's sidecar until its SIGKILL", &log_a);
    // What the take-over received again and skipped (committed by region A before it died).
    let skipped: u64 = log_b
        .lines()
        .filter(|l| l.contains("skipping rows already committed"))
        .filter_map(|l| {
            l.split("dropped=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    eprintln!("standby: region B's subscription started with backlog {b_backlog:?}; {skipped} rows skipped as committed by region A");

    // Nothing lost, nothing twice.
    let total = IN_A + IN_B;
    geo.assert_table_holds_once(total);

    // Region B's Redis holds every entity's newest event.
    let read = feast_read(&geo.redis_hosts()[1], &geo.feast_project, ENTITIES);
    for (entity, (purchases, event_ms)) in read.iter().enumerate() {
        let i = total - ENTITIES + entity as u64;
        assert_eq!(
            (*purchases, *event_ms),
            ((i * 3) as i64, BASE + i as i64),
            "user-{entity} in region B"
        );
    }
}
