//! Quiet when all is well: a run, its SIGTERM shutdown, a restart, a backfill and a
//! partition hand-over between two replicas log no WARN and no ERROR line. Those levels are
//! for what an operator must act on, and a log search for them after a clean run must find
//! nothing.

use std::time::Duration;

use crate::common::*;

const BASE: i64 = 1_767_225_600_000;

/// A project on a new namespace whose acknowledged messages stay readable (for backfill).
async fn project_on_own_namespace(prefix: &str, partitions: u32) -> Project {
    let namespace = unique(prefix);
    create_namespace(&namespace, "BACKWARD").await;
    retain_acknowledged(&namespace).await;
    let mut project = Project::new(&redis_url());
    project.topic = format!("persistent://public/{namespace}/features");
    if partitions > 0 {
        create_partitioned_topic(&project.topic, partitions).await;
    }
    project
}

/// Starts a replica of `project`'s pipelines: its own instance id, probes port and log
/// (`<name>.log`).
fn start_replica(project: &Project, name: &str) -> Connector {
    let port = free_port().to_string();
    project.start_with_env(
        &format!("{name}.log"),
        &[
            ("FC_INSTANCE_ID", name),
            ("FC_HTTP_BIND", &format!("127.0.0.1:{port}")),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_shutdown_restart_and_backfill_log_no_warning() {
    let project = project_on_own_namespace("quiet", 0).await;
    let prefix = unique("quiet");
    project.pipeline(
        "quiet",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    // Producer batches of 10: a backfill reads thousands of entries, each acknowledged by the
    // reader, which is where pulsar-rs's "ack error" lines came from.
    project.produce("quiet", 10_000, 500, BASE, 10);
    let connector = project.start();
    wait_drained(&project.topic, &["quiet"], Duration::from_secs(90)).await;
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    assert_quiet("a run and its SIGTERM shutdown", &log);

    let connector = project.start_with_env("restart.log", &[]);
    project.produce("quiet", 1_000, 500, BASE + 10_000, 10);
    wait_drained(&project.topic, &["quiet"], Duration::from_secs(60)).await;
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    assert_quiet("a restart", &log);

    let backfill = project.run_command(&[
        "backfill",
        "--pipeline",
        "quiet",
        "--from",
        "earliest",
        "--offline-url",
        "file://backfilled",
    ]);
    let stderr = String::from_utf8_lossy(&backfill.stderr);
    assert!(backfill.status.success(), "{stderr}");
    assert_quiet("a backfill", &stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_hand_over_between_replicas_logs_no_warning() {
    let project = project_on_own_namespace("handover", 2).await;
    project.pipeline(
        "handover",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline\n  rollover_rows: 1000\n  rollover_interval: 1s",
    );
    let first = start_replica(&project, "a");
    project.produce("handover", 4_000, 400, BASE, 20);
    // The second replica takes one partition over from the first (Failover), then the first
    // stops and hands the other over too.
    let second = start_replica(&project, "b");
    tokio::time::sleep(Duration::from_secs(3)).await;
    project.produce("handover", 4_000, 400, BASE + 4_000, 20);
    let (code, first_log) = first.stop_with_log();
    assert_eq!(code, 0, "{first_log}");
    project.produce("handover", 2_000, 400, BASE + 8_000, 20);
    wait_drained(&project.topic, &["handover"], Duration::from_secs(90)).await;
    let (code, second_log) = second.stop_with_log();
    assert_eq!(code, 0, "{second_log}");
    assert_eq!(
        unique_events(&local_offline_url(&project), "handover").await,
        10_000
    );
    assert_quiet("the replica that handed its partitions over", &first_log);
    assert_quiet("the replica that took them over", &second_log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_backfill_beside_running_replicas_logs_no_warning() {
    const EVENTS: u64 = 300_000;
    let project = project_on_own_namespace("bigfill", 2).await;
    project.pipeline(
        "bigfill",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline\n  rollover_rows: 50000\n  rollover_interval: 2s",
    );
    let first = start_replica(&project, "a");
    let second = start_replica(&project, "b");
    // Producer batches of 100: the readers tear down with thousands of entries in flight,
    // which is where pulsar-rs's "cannot send a message from the consumer engine" and
    // "tx returned SendError" lines came from.
    project.produce("bigfill", EVENTS, 20_000, BASE, 100);
    let backfill = project.run_command(&[
        "backfill",
        "--pipeline",
        "bigfill",
        "--from",
        "earliest",
        "--offline-url",
        "file://backfilled",
    ]);
    let stderr = String::from_utf8_lossy(&backfill.stderr);
    assert!(backfill.status.success(), "{stderr}");
    assert_quiet("a 300,000-event backfill beside two replicas", &stderr);
    wait_drained(&project.topic, &["bigfill"], Duration::from_secs(180)).await;
    for (name, connector) in [("a", first), ("b", second)] {
        let (code, log) = connector.stop_with_log();
        assert_eq!(code, 0, "{log}");
        assert_quiet(&format!("replica {name} beside the backfill"), &log);
    }
    let backfilled = format!("file://{}", project.path().join("backfilled").display());
    assert_eq!(unique_events(&backfilled, "bigfill").await, EVENTS as usize);
}
