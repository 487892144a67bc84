//! Active/active: each region's sidecar reads its own cluster, writes its own Redis and
//! commits to the shared table only the events first written to its cluster.

use std::time::Duration;

use super::*;

use super::BASE;

/// Events 0..HALF are produced in region A, HALF..2*HALF in region B (both shuffled, at the
/// same time), then LATE more in region A: entities 0..LATE then have their newest event in
/// A, the others in B.
const HALF: u64 = 50_000;
const LATE: u64 = 500;

/// The event whose value each entity must end with, in every region.
fn newest(entity: u64) -> u64 {
    if entity < LATE {
        2 * HALF + entity
    } else {
        2 * HALF - ENTITIES + entity
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regions_converge_online_and_commit_every_event_once_offline() {
    let geo = TwoRegions::new(4, "    offline: own_region\n").await;
    let (regions, topic) = (&geo.regions, &geo.topic);
    let (project_a, project_b) = (&geo.a, &geo.b);

    let mut sidecar_a = project_a.start_with_env("run-a-0.log", &[]);
    let sidecar_b = project_b.start_with_env("run-b.log", &[]);
    let producers = [
        produce(project_a, 0, HALF, &["--rate", "8000"]),
        // Slower: region A's sidecar then reads only region B's copies for a few seconds
        // (rollovers without rows), before region A's late events.
        produce(project_b, HALF, HALF, &["--rate", "5000"]),
    ];
    // Region A's sidecar dies three times while both regions produce.
    for round in 1..=3 {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        sidecar_a.kill_hard();
        tokio::time::sleep(Duration::from_millis(500)).await;
        sidecar_a = project_a.start_with_env(&format!("run-a-{round}.log"), &[]);
    }
    for producer in producers {
        producer.join().expect("producer thread");
    }
    produce(project_a, 2 * HALF, LATE, &[])
        .join()
        .expect("late producer");
    wait_drained_everywhere(regions, topic, "user_features", Duration::from_secs(180)).await;
    let (code_b, log_b) = sidecar_b.stop_with_log();
    let (code_a, log_a) = sidecar_a.stop_with_log();
    assert_eq!((code_a, code_b), (0, 0), "clean shutdowns");
    assert_quiet("region A's last sidecar", &log_a);
    assert_quiet_but_broker_retries("region B's sidecar", &log_b);

    // Online: Feast's SDK reads the same newest values in both regions.
    for (name, host) in ["A", "B"].into_iter().zip(geo.redis_hosts()) {
        let read = feast_read(&host, &geo.feast_project, ENTITIES);
        for (entity, (purchases, event_ms)) in read.iter().enumerate() {
            let i = newest(entity as u64);
            assert_eq!(
                (*purchases, *event_ms),
                ((i * 3) as i64, BASE + i as i64),
                "region {name}, user-{entity}"
            );
        }
    }

    // Offline: every event once, whichever region it was produced in.
    let total = 2 * HALF + LATE;
    geo.assert_table_holds_once(total);
}
