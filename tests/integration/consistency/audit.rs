//! `feature-connector audit` and the continuous audit of `run`, against Redis and the
//! Delta table that real connectors wrote.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::Value;

use crate::common::*;

/// Runs `audit` with `args`; (exit code, the JSON report).
fn audit_json(project: &Project, pipeline: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["audit", "--pipeline", pipeline, "--json"];
    all.extend_from_slice(args);
    let output = project.run_command(&all);
    let code = exit_code(output.status);
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "audit printed no JSON ({e}), exit {code}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (code, report)
}

fn outcome(report: &Value, name: &str) -> u64 {
    report["outcomes"][name].as_u64().unwrap_or(u64::MAX)
}

/// Two replicas on a partitioned topic, restarted and SIGKILLed while events flow (Feast
/// layout online, the Delta table offline): once they drained, every entity's online row
/// equals the table's newest, and an audit taken while they still ran found no defect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_killed_mid_stream_leave_online_and_offline_equal() {
    const EVENTS: u64 = 30_000;
    const ENTITIES: u64 = 3_000;
    let namespace = unique("aud");
    create_namespace(&namespace, "BACKWARD").await;
    let mut project = Project::new(&redis_url());
    project.topic = format!("persistent://public/{namespace}/features");
    create_partitioned_topic(&project.topic, 4).await;
    let feast_project = unique("audp").replace('-', "_");
    project.pipeline(
        "aud",
        &format!("online:\n  layout: feast\n  feast_project: {feast_project}"),
        "offline:\n  url: file://offline\n  rollover_rows: 2000\n  rollover_interval: 1s",
    );
    let ports = [free_port(), free_port()];
    let start = |replica: usize, round: usize| {
        project.start_with_env(
            &format!("r{replica}-{round}.log"),
            &[
                ("FC_INSTANCE_ID", &format!("r{replica}")),
                ("FC_HTTP_BIND", &format!("127.0.0.1:{}", ports[replica])),
            ],
        )
    };
    let mut replicas = [Some(start(0, 0)), Some(start(1, 0))];
    let producer = project
        .command_with_env(
            &[
                "produce",
                "--pipeline",
                "aud",
                "--count",
                &EVENTS.to_string(),
                "--entities",
                &ENTITIES.to_string(),
                "--live-event-time",
                "--batch",
                "50",
                "--rate",
                "3000",
            ],
            &[],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the producer");
    let started = Instant::now();
    let mut round = 1;
    while started.elapsed() < Duration::from_secs(6) {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let which = round % 2;
        if let Some(replica) = replicas[which].take() {
            if round % 2 == 1 {
                replica.kill_hard();
            } else {
                assert_eq!(replica.stop(), 0, "graceful stop of r{which}");
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        replicas[which] = Some(start(which, round));
        round += 1;
    }
    let produced = producer.wait_with_output().expect("producer");
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let last_event_ms = chrono::Utc::now().timestamp_millis();

    // Right after the last event, replicas still running: the table may lag behind online,
    // online never behind the table. The lag is about a rollover (1 s), or, for a partition
    // whose replica was just killed, the rollover it lost: redelivered to the replica that
    // takes the partition over and committed by it (up to 5.6 s seen on a 2-core box).
    let (code, live) = audit_json(&project, "aud", &["--sample", "all"]);
    assert_eq!(code, 0, "{live:#}");
    assert_eq!(live["defects"], 0, "{live:#}");
    if let Some(lag) = live["lag"].as_object() {
        // Every event online ahead of the table arrived within a take-over and a rollover
        // of the last one, its commit and the audit's start included.
        let oldest = lag["oldest_online_event_time_ms"].as_i64().expect("oldest");
        assert!(oldest >= last_event_ms - 10_000, "{live:#}");
    }

    let partitions: Vec<String> = (0..4)
        .map(|p| format!("{}-partition-{p}", project.topic))
        .collect();
    for partition in &partitions {
        wait_drained(partition, &["aud"], Duration::from_secs(120)).await;
    }
    // One rollover interval after the last acknowledgement every row is committed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, drained) = audit_json(&project, "aud", &["--sample", "all"]);
    for replica in replicas.into_iter().flatten() {
        assert_eq!(replica.stop(), 0);
    }
    assert_eq!(code, 0, "{drained:#}");
    assert_eq!(drained["entities"], ENTITIES, "{drained:#}");
    assert_eq!(outcome(&drained, "equal"), ENTITIES, "{drained:#}");
    assert_eq!(drained["defects"], 0, "{drained:#}");
    assert!(
        drained["online_keys_scanned"].as_u64() >= Some(ENTITIES),
        "{drained:#}"
    );
    for feature in drained["features"].as_array().expect("features") {
        assert_eq!(feature["compared"], ENTITIES, "{feature}");
        assert_eq!(feature["mismatches"], 0, "{feature}");
    }
    println!(
        "live audit: {} (lag {}), drained audit: {:.2} s for {} entities",
        live["outcomes"],
        live["lag"],
        drained["seconds"].as_f64().unwrap_or(0.0),
        drained["entities"]
    );
}

/// Faults written into Redis behind the connector's back are caught and named: an older
/// value (table ahead), a key deleted inside its TTL (missing online), a different value
/// at the same event time (skew). Entities named in a file are audited alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_are_caught_and_named() {
    let project = Project::new(&redis_url());
    let prefix = unique("aud");
    project.pipeline(
        "faults",
        &format!("online:\n  key_prefix: {prefix}\n  ttl: 30d"),
        "offline:\n  url: file://offline\n  rollover_rows: 100000\n  rollover_interval: 1s",
    );
    let base_ms = chrono::Utc::now().timestamp_millis() - 60_000;
    project.produce("faults", 400, 40, base_ms, 50);
    let connector = project.start();
    wait_drained(&project.topic, &["faults"], Duration::from_secs(60)).await;
    assert_eq!(connector.stop(), 0);

    let (code, clean) = audit_json(&project, "faults", &["--sample", "all"]);
    assert_eq!(code, 0, "{clean:#}");
    assert_eq!(outcome(&clean, "equal"), 40, "{clean:#}");

    let key = |user: &str| format!("{prefix}:faults:{user}");
    let mut redis = redis(&redis_url()).await;
    let users: Vec<String> = {
        let mut keys: Vec<String> = redis.keys(format!("{prefix}:faults:*")).await.unwrap();
        keys.sort();
        keys.iter()
            .map(|k| k.rsplit(':').next().unwrap().to_string())
            .collect()
    };
    let (older, deleted, skewed) = (&users[0], &users[1], &users[2]);
    let stored: i64 = redis.hget(key(older), "_ts").await.unwrap();
    let _: () = redis
        .hset_multiple(
            key(older),
            &[
                ("_ts", (stored - 5_000).to_string()),
                ("sessions_7d", "-1".to_string()),
            ],
        )
        .await
        .unwrap();
    let _: () = redis.del(key(deleted)).await.unwrap();
    let _: () = redis
        .hset(key(skewed), "avg_basket_eur", "123456.5")
        .await
        .unwrap();

    let (code, found) = audit_json(&project, "faults", &["--sample", "all"]);
    assert_eq!(code, 1, "defects exit 1: {found:#}");
    assert_eq!(found["defects"], 3, "{found:#}");
    assert_eq!(outcome(&found, "table_ahead"), 1, "{found:#}");
    assert_eq!(outcome(&found, "missing_online"), 1, "{found:#}");
    assert_eq!(outcome(&found, "skew"), 1, "{found:#}");
    assert_eq!(outcome(&found, "equal"), 37, "{found:#}");
    let named = |class: &str| found["examples"][class][0]["entity"]["user_id"].clone();
    assert_eq!(
        named("table_ahead"),
        Value::from(older.as_str()),
        "{found:#}"
    );
    assert_eq!(
        named("missing_online"),
        Value::from(deleted.as_str()),
        "{found:#}"
    );
    assert_eq!(named("skew"), Value::from(skewed.as_str()), "{found:#}");
    assert_eq!(
        found["examples"]["skew"][0]["differing"],
        serde_json::json!(["avg_basket_eur"])
    );
    let basket = found["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["feature"] == "avg_basket_eur")
        .cloned()
        .unwrap();
    assert_eq!(basket["mismatches"], 1, "{basket}");
    assert!(basket["smape"].as_f64().unwrap() > 0.0, "{basket}");

    // A file naming two entities (one nobody wrote) audits those alone.
    let file = project.path().join("entities.txt");
    std::fs::write(
        &file,
        format!("# audit these\nuser_id={skewed}\nuser_id=nobody\n"),
    )
    .unwrap();
    let (code, named_run) = audit_json(&project, "faults", &["--entities", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{named_run:#}");
    assert_eq!(named_run["entities"], 2, "{named_run:#}");
    assert_eq!(
        (outcome(&named_run, "skew"), outcome(&named_run, "absent")),
        (1, 1),
        "{named_run:#}"
    );

    // Usage errors exit 2 and say why; the text report names the classes.
    let bad = project.run_command(&["audit", "--pipeline", "faults", "--sample", "some"]);
    assert_eq!(exit_code(bad.status), 2);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--sample `some`"));
    let text = project.run_command(&["audit", "--pipeline", "faults", "--sample", "10"]);
    let shown = String::from_utf8_lossy(&text.stdout);
    assert!(
        shown.contains("table_ahead") && shown.contains("result:"),
        "{shown}"
    );
}

/// With `audit.enabled`, `run` audits at its interval and exports the outcome; a skewed
/// value shows in `audit_defect_entities` and one warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_audits_at_its_interval_and_exports_the_outcome() {
    let project = Project::new(&redis_url());
    let prefix = unique("aud");
    project.pipeline(
        "cont",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_rows: 100000\n  rollover_interval: 1s",
    );
    let config = project.path().join("config.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("audit:\n  enabled: true\n  interval: 2s\n  sample: 1000\n");
    std::fs::write(&config, text).unwrap();
    project.produce(
        "cont",
        300,
        30,
        chrono::Utc::now().timestamp_millis() - 60_000,
        50,
    );
    let connector = project.start();
    let metric = |text: &str, name: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let equal = r#"feature_connector_audit_entities{pipeline="cont",outcome="equal"}"#;
    wait_until(
        "a clean audit of 30 entities",
        Duration::from_secs(60),
        || async {
            let (_, text) = project.http_get("/metrics").await.unwrap_or_default();
            metric(&text, equal) == Some(30.0)
        },
    )
    .await;
    let mut redis = redis(&redis_url()).await;
    let keys: Vec<String> = redis.keys(format!("{prefix}:cont:*")).await.unwrap();
    let _: () = redis
        .hset(&keys[0], "favourite_category", "tampered")
        .await
        .unwrap();
    let defects = r#"feature_connector_audit_defect_entities{pipeline="cont"}"#;
    wait_until(
        "the skew in the gauges",
        Duration::from_secs(30),
        || async {
            let (_, text) = project.http_get("/metrics").await.unwrap_or_default();
            metric(&text, defects) == Some(1.0)
        },
    )
    .await;
    let (_, text) = project.http_get("/metrics").await.unwrap();
    assert_eq!(
        metric(
            &text,
            r#"feature_connector_audit_feature_mismatch_ratio{pipeline="cont",feature="favourite_category"}"#
        ),
        Some(1.0 / 30.0),
        "{text}"
    );
    assert!(
        metric(
            &text,
            r#"feature_connector_audit_runs_total{pipeline="cont",result="defects"}"#
        ) >= Some(1.0)
    );
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0);
    let warnings = loud_lines(&log);
    assert!(
        !warnings.is_empty() && warnings.iter().all(|l| l.contains("audit found entities")),
        "only the audit's finding is a warning: {warnings:#?}"
    );
}
