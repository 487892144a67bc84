//! Entry-id gaps the broker makes (transaction markers, aborted transactional messages,
//! replicated-subscription snapshot markers) do not hold commits back: the broker
//! acknowledges those entries in the connector's cursor, and the sink commits past them at
//! once instead of waiting out its gap grace.
//!
//! Runs against the second broker of the geo services (`cluster-b`, transactions and
//! replicated subscriptions on); the transactional producer is
//! tests/java/TxnGapProducer.java on the broker's cached classpath (as scripts/geo_smoke.sh
//! runs its Java check).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use arrow::array::{Array, Int64Array};

use crate::common::*;

const BASE: i64 = 1_791_000_000_000;
const EVENTS: u64 = 600;

/// The Java binary and the broker's classpath that services.sh caches.
fn java_and_classpath() -> (PathBuf, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let state = std::env::var("FC_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join(".services"));
    let classpath = std::fs::read_dir(state.join("pulsar"))
        .expect("the services' pulsar folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("classpath-"))
                && p.extension().is_some_and(|x| x == "txt")
        })
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find(|cp| !cp.trim().is_empty())
        .expect("a cached broker classpath (scripts/services.sh start-geo)");
    let java = [
        std::env::var("FC_JAVA_HOME").ok(),
        Some("/usr/lib/jvm/java-17-openjdk-amd64".into()),
    ]
    .into_iter()
    .flatten()
    .map(|home| Path::new(&home).join("bin/java"))
    .find(|java| java.is_file())
    .unwrap_or_else(|| PathBuf::from("java"));
    (java, classpath.trim().to_string())
}

/// Per table file (as the log names it), the time of the commit that added it, epoch ms.
fn commit_times(table_dir: &Path) -> HashMap<String, i64> {
    let mut times = HashMap::new();
    let log = std::fs::read_dir(table_dir.join("_delta_log")).expect("the table's log");
    for entry in log.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a commit file");
        let actions: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        let committed = actions
            .iter()
            .find_map(|a| a["commitInfo"]["timestamp"].as_i64())
            .or_else(|| {
                actions
                    .iter()
                    .filter_map(|a| a["add"]["modificationTime"].as_i64())
                    .max()
            });
        for action in &actions {
            if let (Some(file), Some(at)) = (action["add"]["path"].as_str(), committed) {
                let file = percent_encoding::percent_decode_str(file)
                    .decode_utf8_lossy()
                    .to_string();
                times.insert(file, at);
            }
        }
    }
    times
}

fn int64_column(batch: &arrow::array::RecordBatch, name: &str) -> Int64Array {
    let column = arrow::compute::cast(
        batch.column_by_name(name).expect("column"),
        &arrow::datatypes::DataType::Int64,
    )
    .expect("cast");
    column
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("int64")
        .clone()
}

/// The `p`-th percentile of sorted `values`.
fn percentile(values: &[i64], p: f64) -> i64 {
    let at = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[at.min(values.len() - 1)]
}

/// What one run saw: publish-to-commit latency per event (ms, sorted), the gaps the sink
/// bridged, and the connector's log.
struct Run {
    latencies: Vec<i64>,
    bridged: usize,
    log: String,
}

impl Run {
    fn summary(&self) -> String {
        let l = &self.latencies;
        format!(
            "{} events, publish to commit p50 {} ms, p99 {} ms, max {} ms; gaps bridged: {}",
            l.len(),
            percentile(l, 0.5),
            percentile(l, 0.99),
            l[l.len() - 1],
            self.bridged
        )
    }
}

/// Produces `events` at `rate`/s to a new topic on cluster-b with the connector running
/// (rollover 1 s); with `markers`, in transactions of 5 events (every 4th aborted) and with a
/// replicated subscription on the topic, else without transactions and without it. Asserts
/// every event is in the table once. `blind`: the connector's admin URL is the other
/// cluster's, where its subscription has no cursor, so it cannot tell which gaps the broker
/// skipped and waits out the grace on each (as before the sink asked).
async fn run(markers: bool, events: u64, rate: u64, blind: bool) -> Run {
    let pulsar_b = env_path("PULSAR_B_URL");
    let admin_b = env_path("PULSAR_B_ADMIN_URL");
    let namespace = env_path("FC_TEST_GEO_NAMESPACE");
    let mut project = Project::new(&redis_url());
    project.topic = format!("persistent://{namespace}/{}", unique("gaps"));
    let admin = if blind {
        pulsar_admin()
    } else {
        admin_b.clone()
    };
    project.pulsar_section(&pulsar_b, &admin, "");
    project.schema_file(
        "gap_event.avsc",
        r#"{"type":"record","name":"GapEvent","fields":[
            {"name":"user_id","type":"string"},
            {"name":"event_time","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"seq","type":"long"}]}"#,
    );
    project.pipeline_with_schema(
        "gaps",
        "  file: schemas/gap_event.avsc\n  format: json",
        "online:\n  enabled: false",
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );

    // The connector's subscription, and a second one with replicated subscriptions on: the
    // broker then writes a snapshot marker about every second while messages come.
    let http = feature_connector::tls::http_client();
    let path = project
        .topic
        .strip_prefix("persistent://")
        .expect("persistent");
    let subscription =
        |name: &str| format!("{admin_b}/admin/v2/persistent/{path}/subscription/{name}");
    let earliest = r#"{"ledgerId": -1, "entryId": -1, "partitionIndex": -1}"#;
    let names: &[&str] = if markers {
        &["gaps", "mirror"]
    } else {
        &["gaps"]
    };
    for name in names {
        let request = http
            .put(subscription(name))
            .header("content-type", "application/json")
            .body(earliest);
        admin_ok(request, &format!("create subscription {name}")).await;
    }
    if markers {
        let request = http
            .post(format!(
                "{}/replicatedSubscriptionStatus",
                subscription("mirror")
            ))
            .header("content-type", "application/json")
            .body("true");
        admin_ok(request, "replicate subscription mirror").await;
    }

    let connector = project.start_with_env(
        "run.log",
        &[(
            "RUST_LOG",
            "info,pulsar=warn,feature_connector::delta::streaming::bridge=debug",
        )],
    );
    let (java, classpath) = java_and_classpath();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let per_txn = if markers { "5" } else { "0" };
    let produced = Command::new(java)
        .current_dir(project.path())
        .arg("-Xmx256m")
        .arg(format!("-Dpulsar.log.dir={}", project.path().display()))
        .arg(format!(
            "-Dlog4j.configurationFile={}",
            root.join("services/pulsar/log4j2.xml").display()
        ))
        .arg("-cp")
        .arg(classpath)
        .arg(root.join("tests/java/TxnGapProducer.java"))
        .args([
            pulsar_b.as_str(),
            project.topic.as_str(),
            &events.to_string(),
            &rate.to_string(),
            per_txn,
            "4",
            &BASE.to_string(),
        ])
        .output()
        .expect("run the transactional producer");
    assert!(
        produced.status.success(),
        "TxnGapProducer: {}",
        String::from_utf8_lossy(&produced.stderr)
    );
    println!("{}", String::from_utf8_lossy(&produced.stdout).trim());

    let store = local_offline_url(&project);
    wait_until(
        "every event in the table",
        Duration::from_secs(60),
        || async {
            project.path().join("offline/gaps/_delta_log").exists()
                && read_table(&store, "gaps")
                    .await
                    .iter()
                    .map(|(_, b)| b.num_rows())
                    .sum::<usize>()
                    >= events as usize
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");

    // Every committed event once, no aborted one.
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    let mut latencies = Vec::new();
    let committed_at = commit_times(&project.path().join("offline/gaps"));
    for (file, batch) in read_table(&store, "gaps").await {
        let at = *committed_at
            .get(&file)
            .unwrap_or_else(|| panic!("{file} in no commit of {committed_at:?}"));
        let seqs = int64_column(&batch, "seq");
        let published = int64_column(&batch, "pulsar_publish_time");
        for row in 0..batch.num_rows() {
            *seen.entry(seqs.value(row)).or_default() += 1;
            latencies.push(at - published.value(row) / 1000);
        }
    }
    let expected: BTreeMap<i64, usize> = (0..events as i64).map(|s| (s, 1)).collect();
    assert_eq!(
        seen, expected,
        "every event once, none of an aborted transaction"
    );
    latencies.sort_unstable();
    let bridged = log
        .matches("the broker skipped the entries between")
        .count();
    Run {
        latencies,
        bridged,
        log,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_and_snapshot_markers_do_not_hold_commits_back() {
    let run = run(true, EVENTS, 100, false).await;
    println!("with markers: {}", run.summary());
    // Committed within a rollover or two, never near the 10 s gap grace.
    let max = run.latencies[run.latencies.len() - 1];
    assert!(max < 6_000, "{}", run.summary());
    assert!(
        run.bridged > 0,
        "the run had broker-made gaps to bridge: {}",
        run.log
    );
    assert!(!run.log.contains("never arrived"), "{}", run.log);
    crate::geo::assert_quiet_but_broker_retries("the connector", &run.log);
}

/// Commit latency without markers, with them, and with them but blind to what the broker
/// skipped (a measurement, not a check: run by hand with
/// `-- --ignored offline::broker_gaps::commit_latency --nocapture`; `FC_GAPS_EVENTS` events
/// per run, default 2000, at 100/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn commit_latency_with_and_without_markers() {
    let events = std::env::var("FC_GAPS_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let without = run(false, events, 100, false).await;
    println!("without markers:          {}", without.summary());
    let with = run(true, events, 100, false).await;
    println!("with markers:             {}", with.summary());
    let blind = run(true, events, 100, true).await;
    println!(
        "with markers, not asking: {}; WARN lines: {}",
        blind.summary(),
        loud_lines(&blind.log).len()
    );
}

/// Messages the broker expires (a TTL, or `expire-messages` as here) are acknowledged in the
/// subscription's cursor: the gap they leave is committed past at once, without a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_messages_do_not_hold_commits_back() {
    const BASE: i64 = 1_794_000_000_000;
    let project = Project::new(&redis_url());
    let url = local_offline_url(&project);
    project.pipeline(
        "expiry",
        "online:\n  enabled: false",
        &format!("offline:\n  url: {url}\n  rollover_interval: 1s"),
    );
    let produce = |start: u64| {
        project.produce_with(
            "expiry",
            &[
                "--start",
                &start.to_string(),
                "--count",
                "100",
                "--entities",
                "10",
                "--base-ms",
                &BASE.to_string(),
            ],
        )
    };
    // 100 events committed, then 100 that will expire and 100 that will not.
    produce(0);
    let connector = project.start_with_env("run-1.log", &[]);
    wait_drained(&project.topic, &["expiry"], Duration::from_secs(60)).await;
    assert_eq!(connector.stop(), 0);
    assert_eq!(unique_events(&url, "expiry").await, 100);
    produce(100);
    tokio::time::sleep(Duration::from_secs(3)).await;
    produce(200);
    let expire = feature_connector::tls::http_client().post(topic_admin_url(
        &project.topic,
        "subscription/expiry/expireMessages/2",
    ));
    admin_ok(expire, "expire the messages older than 2 s").await;
    wait_until(
        "the expired messages to leave the backlog",
        Duration::from_secs(30),
        || async { backlog(&project.topic, "expiry").await == Some(100) },
    )
    .await;

    let started = Instant::now();
    let connector = project.start_with_env("run-2.log", &[]);
    wait_until(
        "the events after the expired ones in the table",
        Duration::from_secs(60),
        || async { unique_events(&url, "expiry").await == 200 },
    )
    .await;
    let took = started.elapsed();
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0);
    assert_quiet("the connector after the expiry", &log);
    assert!(
        took < Duration::from_secs(8),
        "the gap of expired messages held the commit for {took:?} (the grace is 10 s)"
    );
    assert_eq!(
        unique_events(&url, "expiry").await,
        200,
        "events 100..200 expired"
    );
}
