//! Schema evolution and bad input against the real broker: compatible versions decode,
//! incompatible versions and bad payloads go to the dead-letter topic with their reason,
//! the pipeline goes on; `schemas check` and start-up refusal name the fields.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::TimestampMicrosecondType;
use redis::AsyncCommands;

use crate::common::*;

const V1: &str = include_str!("../../../schemas/user_profile.avsc");

/// v1 plus a feature with a default (BACKWARD and FORWARD compatible).
fn v2() -> String {
    V1.replace(
        r#"{"name": "last_review_score", "type": ["null", "double"], "default": null}"#,
        r#"{"name": "last_review_score", "type": ["null", "double"], "default": null},
    {"name": "churn_risk", "type": "double", "default": 0.0}"#,
    )
}

/// v1 with a used feature changed from long to string.
fn v3() -> String {
    V1.replace(
        r#"{"name": "purchases_30d", "type": "long"}"#,
        r#"{"name": "purchases_30d", "type": "string"}"#,
    )
}

/// v1 with a used feature made nullable (its null values cannot be read as long).
fn nullable_purchases() -> String {
    V1.replace(
        r#"{"name": "purchases_30d", "type": "long"}"#,
        r#"{"name": "purchases_30d", "type": ["long", "null"]}"#,
    )
}

fn event_indices(batches: &[(String, arrow::array::RecordBatch)], base_ms: i64) -> BTreeSet<i64> {
    let mut seen = BTreeSet::new();
    for (_, batch) in batches {
        let times = batch
            .column_by_name("event_time")
            .expect("event_time")
            .as_primitive::<TimestampMicrosecondType>();
        for row in 0..batch.num_rows() {
            assert!(
                seen.insert(times.value(row) / 1000 - base_ms),
                "duplicate row"
            );
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evolution_decodes_compatible_versions_and_dead_letters_an_incompatible_one() {
    const BASE: i64 = 1_781_000_000_000;
    let namespace = unique("evo");
    create_namespace(&namespace, "ALWAYS_COMPATIBLE").await;
    let mut project = Project::new(&redis_url());
    project.topic = format!("persistent://public/{namespace}/features");
    project.schema_file("v2.avsc", &v2());
    project.schema_file("v3.avsc", &v3());
    let prefix = unique("evo");
    project.pipeline(
        "evo",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    let common = |start: &str, count: &str| {
        vec![
            "--entities".to_string(),
            "100".into(),
            "--base-ms".into(),
            BASE.to_string(),
            "--start".into(),
            start.into(),
            "--count".into(),
            count.into(),
        ]
    };
    let with = |args: Vec<String>, schema: Option<&str>| {
        let mut args = args;
        if let Some(schema) = schema {
            args.push("--schema".into());
            args.push(
                project
                    .path()
                    .join("schemas")
                    .join(schema)
                    .display()
                    .to_string(),
            );
        }
        args
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        project.produce_with("evo", &refs);
    };
    run(common("0", "300"));
    let mut connector = project.start();
    let topic = project.topic.clone();
    wait_until("subscriptions", Duration::from_secs(60), || {
        all_drained(&topic, &["evo"])
    })
    .await;

    run(with(common("300", "300"), Some("v2.avsc")));
    run(with(common("600", "200"), Some("v3.avsc")));
    run(common("800", "200"));
    wait_until("all versions consumed", Duration::from_secs(90), || {
        connector.assert_running();
        all_drained(&topic, &["evo"])
    })
    .await;

    let dead = read_dead_letters(&format!("{topic}-evo-DLQ"), 200).await;
    assert_eq!(dead.len(), 200, "exactly the v3 messages are dead-lettered");
    for properties in &dead {
        assert_eq!(
            properties.get("reason").map(String::as_str),
            Some("incompatible_schema")
        );
        let detail = properties.get("reason_detail").cloned().unwrap_or_default();
        assert!(
            detail.contains("field purchases_30d: string cannot be read as long"),
            "{detail}"
        );
        assert_eq!(properties.get("pipeline").map(String::as_str), Some("evo"));
        assert_eq!(
            properties.get("schema_version").map(String::as_str),
            Some("2")
        );
        assert!(properties.contains_key("original_message_id"));
    }

    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    assert!(
        metrics.contains(r#"feature_connector_dead_letter_messages_total{pipeline="evo",reason="incompatible_schema"} 200"#),
        "{metrics}"
    );
    let log = connector.log();
    assert_eq!(
        log.matches("starting").count(),
        1,
        "the connector never restarted:\n{log}"
    );
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    // 200 dead letters, two log lines: the first at once, the other 199 counted in one
    // line (written at the interval's end, here at shutdown); the metric counts each.
    let loud = loud_lines(&log);
    assert_eq!(loud.len(), 2, "{loud:#?}");
    assert!(
        loud.iter().all(|line| line.contains("dead-letter topic")
            && line.contains("reason=\"incompatible_schema\"")
            && line.contains("schema_version=Some(2)")),
        "{loud:#?}"
    );
    assert!(loud[0].contains("message_id="), "{}", loud[0]);
    assert!(
        loud[1].contains("count=199") && loud[1].contains("first_message_id="),
        "{}",
        loud[1]
    );

    let mut redis = redis(&redis_url()).await;
    for entity in 0..100u64 {
        let stored: HashMap<String, Vec<u8>> = redis
            .hgetall(format!("{prefix}:evo:user-{entity}"))
            .await
            .expect("hgetall");
        let last = 900 + entity;
        assert_eq!(
            stored.get("purchases_30d"),
            Some(&(last * 3).to_string().into_bytes())
        );
        assert!(
            !stored.contains_key("churn_risk"),
            "only the pipeline's (v1) features are written"
        );
    }
    let store = local_offline_url(&project);
    let batches = read_table(&store, "evo").await;
    assert!(batches
        .iter()
        .all(|(_, b)| b.schema().field_with_name("churn_risk").is_err()));
    let expected: BTreeSet<i64> = (0..600).chain(800..1000).collect();
    assert_eq!(
        event_indices(&batches, BASE),
        expected,
        "v1 and v2 rows once each, no v3 rows"
    );

    // `schemas check` names the field; exit 1 because version 2 is incompatible.
    let output = project.run_command(&["schemas", "check", "evo"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("version 0: compatible (Backward)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("version 1: compatible (Backward)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("version 2: incompatible (Backward)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("field purchases_30d: string cannot be read as long"),
        "{stdout}"
    );

    // With v3 the latest version, a BACKWARD pipeline refuses to start and says why.
    let output = project.run_command(&["run"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refusing to start") && stderr.contains("field purchases_30d"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_truncated_and_null_payloads_each_get_their_reason() {
    const BASE: i64 = 1_782_000_000_000;
    let namespace = unique("bad");
    create_namespace(&namespace, "ALWAYS_COMPATIBLE").await;
    let mut project = Project::new(&redis_url());
    project.topic = format!("persistent://public/{namespace}/features");
    project.schema_file("nullable.avsc", &nullable_purchases());
    let prefix = unique("bad");
    project.pipeline_with_schema(
        "bad",
        "  file: schemas/user_profile.avsc\n  compatibility: ALWAYS_COMPATIBLE",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    project.produce_with(
        "bad",
        &[
            "--count",
            "10",
            "--entities",
            "10",
            "--base-ms",
            &BASE.to_string(),
        ],
    );
    // Events 10..20 with purchases_30d nullable: event 19 carries a null.
    let nullable = project
        .path()
        .join("schemas/nullable.avsc")
        .display()
        .to_string();
    project.produce_with(
        "bad",
        &[
            "--count",
            "10",
            "--start",
            "10",
            "--entities",
            "10",
            "--base-ms",
            &BASE.to_string(),
            "--schema",
            &nullable,
        ],
    );
    let mut truncated = vec![0x0c];
    truncated.extend_from_slice(b"user-1");
    publish_raw(&project.topic, vec![vec![0xff; 11], truncated]).await;

    let connector = project.start();
    let topic = project.topic.clone();
    wait_until("drained", Duration::from_secs(60), || {
        all_drained(&topic, &["bad"])
    })
    .await;
    let dead = read_dead_letters(&format!("{topic}-bad-DLQ"), 3).await;
    let mut reasons: Vec<String> = dead
        .iter()
        .filter_map(|p| p.get("reason").cloned())
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        vec!["null_in_non_null_field", "truncated", "undecodable"],
        "{dead:?}"
    );
    let null = dead
        .iter()
        .find(|p| p.get("reason").map(String::as_str) == Some("null_in_non_null_field"))
        .expect("null");
    assert!(
        null.get("reason_detail")
            .is_some_and(|d| d.contains("purchases_30d")),
        "{null:?}"
    );
    let raw = dead
        .iter()
        .find(|p| p.get("reason").map(String::as_str) == Some("undecodable"))
        .expect("garbage");
    assert_eq!(
        raw.get("origin").map(String::as_str),
        Some("test"),
        "original properties are kept"
    );
    assert_eq!(connector.stop(), 0);

    let store = local_offline_url(&project);
    let expected: BTreeSet<i64> = (0..19).collect();
    assert_eq!(
        event_indices(&read_table(&store, "bad").await, BASE),
        expected,
        "every good event once"
    );
    let mut redis = redis(&redis_url()).await;
    let keys: Vec<String> = redis.keys(format!("{prefix}:bad:*")).await.expect("keys");
    assert_eq!(keys.len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_topic_end_to_end() {
    const BASE: i64 = 1_783_000_000_000;
    let project = Project::new(&redis_url());
    project.schema_file(
        "profile_json.avsc",
        r#"{"type":"record","name":"ProfileJson","fields":[
            {"name":"user_id","type":"string"},
            {"name":"event_time","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"purchases_30d","type":"long"},
            {"name":"avg_basket_eur","type":"double"},
            {"name":"is_premium","type":"boolean"},
            {"name":"segment","type":["null","string"],"default":null}]}"#,
    );
    let prefix = unique("json");
    project.pipeline_with_schema(
        "js",
        "  file: schemas/profile_json.avsc\n  format: json",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    project.produce_with(
        "js",
        &[
            "--count",
            "500",
            "--entities",
            "50",
            "--base-ms",
            &BASE.to_string(),
        ],
    );
    publish_raw(
        &project.topic,
        vec![
            br#"{"event_time": 1, "purchases_30d": 1, "avg_basket_eur": 1.0, "is_premium": true}"#
                .to_vec(),
        ],
    )
    .await;

    let connector = project.start();
    let topic = project.topic.clone();
    wait_until("drained", Duration::from_secs(60), || {
        all_drained(&topic, &["js"])
    })
    .await;
    let dead = read_dead_letters(&format!("{topic}-js-DLQ"), 1).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].get("reason").map(String::as_str),
        Some("missing_entity_key")
    );
    assert_eq!(connector.stop(), 0);

    let mut redis = redis(&redis_url()).await;
    for entity in 0..50u64 {
        let stored: HashMap<String, String> = redis
            .hgetall(format!("{prefix}:js:user-{entity}"))
            .await
            .expect("hgetall");
        let last = 450 + entity;
        assert_eq!(stored.get("purchases_30d"), Some(&(last * 3).to_string()));
        assert_eq!(stored.get("is_premium"), Some(&(last % 2 == 0).to_string()));
        assert_eq!(
            !stored.contains_key("segment"),
            last % 10 == 9,
            "null segment removes the field"
        );
    }
    let store = local_offline_url(&project);
    let expected: BTreeSet<i64> = (0..500).collect();
    assert_eq!(
        event_indices(&read_table(&store, "js").await, BASE),
        expected
    );

    let output = project.run_command(&["schemas", "check", "js"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("version 0: compatible"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_push_registers_and_the_broker_refuses_an_incompatible_change() {
    let namespace = unique("push");
    create_namespace(&namespace, "FULL").await;
    let mut project = Project::new(&redis_url());
    project.topic = format!("persistent://public/{namespace}/features");
    project.schema_file("v3.avsc", &v3());
    project.pipeline(
        "p",
        "online:\n  key_prefix: push",
        "offline:\n  url: file://offline",
    );

    let output = project.run_command(&["schemas", "push", "p"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("registered on") && stdout.contains("as version 0"),
        "{stdout}"
    );
    let output = project.run_command(&["schemas", "check", "p"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );

    // The same pipeline now expects v3 (purchases_30d: string): FULL refuses to register it.
    project.pipeline_with_schema(
        "p",
        "  file: schemas/v3.avsc",
        "online:\n  key_prefix: push",
        "offline:\n  url: file://offline",
    );
    let output = project.run_command(&["schemas", "push", "p"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the broker refused the schema") && stderr.contains("409"),
        "{stderr}"
    );
}
