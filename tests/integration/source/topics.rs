//! Topic shapes against the real broker: a partitioned topic, and a pattern whose topics
//! carry different writer schemas under the same version number and include one created
//! while the connector runs.

use std::time::Duration;

use crate::common::*;

/// The pipeline schema with one more field (a default lets the pipeline read without it).
const WIDER_SCHEMA: &str = r#"{
  "type": "record", "name": "UserProfileFeatures", "namespace": "com.example.features",
  "fields": [
    {"name": "user_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "purchases_30d", "type": "long"},
    {"name": "sessions_7d", "type": "int"},
    {"name": "avg_basket_eur", "type": "double"},
    {"name": "ctr_7d", "type": "float"},
    {"name": "is_premium", "type": "boolean"},
    {"name": "favourite_category", "type": "string"},
    {"name": "embedding_id", "type": "bytes"},
    {"name": "last_review_score", "type": ["null", "double"], "default": null},
    {"name": "country", "type": "string", "default": "NL"}
  ]
}"#;

fn pipeline_yaml(name: &str, topic_lines: &str, prefix: &str) -> String {
    format!(
        "name: {name}\nsource:\n{topic_lines}\n  subscription: {name}\n  max_batch_messages: 200\nschema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  event_time: event_time\nonline:\n  key_prefix: {prefix}\noffline:\n  url: file://offline\n  rollover_rows: 1000\n  rollover_interval: 2s\n"
    )
}

async fn metric_line(project: &Project, needle: &str) -> bool {
    project
        .http_get("/metrics")
        .await
        .is_some_and(|(_, text)| text.lines().any(|line| line == needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_topics_and_topic_patterns_are_consumed_exactly() {
    let project = Project::new(&redis_url());
    project.schema_file("wider.avsc", WIDER_SCHEMA);
    let partitioned = format!("persistent://public/default/{}", unique("part"));
    create_partitioned_topic(&partitioned, 3).await;
    let family = unique("fam");
    let (part_prefix, pat_prefix) = (unique("p"), unique("q"));
    std::fs::write(
        project.path().join("connectors/part.yaml"),
        pipeline_yaml("part", &format!("  topic: {partitioned}"), &part_prefix),
    )
    .expect("pipeline");
    std::fs::write(
        project.path().join("connectors/pat.yaml"),
        pipeline_yaml(
            "pat",
            &format!(
                "  topic_pattern: persistent://public/default/{family}-.*\n  pattern_refresh: 2s"
            ),
            &pat_prefix,
        ),
    )
    .expect("pipeline");
    let base = BASE.to_string();
    project.produce_with(
        "part",
        &[
            "--count",
            "3000",
            "--entities",
            "300",
            "--base-ms",
            &base,
            "--batch",
            "20",
        ],
    );
    // Two topics of the family, each with its own version 0: the narrow and the wider schema.
    let (narrow, wide, late) = (
        format!("persistent://public/default/{family}-a"),
        format!("persistent://public/default/{family}-b"),
        format!("persistent://public/default/{family}-c"),
    );
    project.produce_with(
        "pat",
        &[
            "--topic",
            &narrow,
            "--count",
            "1000",
            "--entities",
            "100",
            "--base-ms",
            &base,
        ],
    );
    let wider = project.path().join("schemas/wider.avsc");
    let wider = wider.to_str().expect("path");
    project.produce_with(
        "pat",
        &[
            "--topic",
            &wide,
            "--schema",
            wider,
            "--count",
            "1000",
            "--start",
            "1000",
            "--entities",
            "100",
            "--base-ms",
            &base,
        ],
    );
    let connector = project.start();
    wait_drained(&partitioned, &["part"], Duration::from_secs(90)).await;
    wait_drained(&narrow, &["pat"], Duration::from_secs(60)).await;
    wait_drained(&wide, &["pat"], Duration::from_secs(60)).await;
    // A topic created while running is found by the next namespace listing.
    project.produce_with(
        "pat",
        &[
            "--topic",
            &late,
            "--count",
            "1000",
            "--start",
            "2000",
            "--entities",
            "100",
            "--base-ms",
            &base,
        ],
    );
    wait_until(
        "the late topic's subscriptions",
        Duration::from_secs(60),
        || all_drained(&late, &["pat"]),
    )
    .await;
    wait_until("the backlog gauge", Duration::from_secs(40), || {
        metric_line(
            &project,
            r#"feature_connector_subscription_backlog_messages{pipeline="part",sink="online+offline"} 0"#,
        )
    })
    .await;
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("feature_connector_dead_letter_messages_total{")),
        "nothing should be dead-lettered:\n{metrics}"
    );
    assert!(
        metrics.contains(
            r#"feature_connector_messages_decoded_total{pipeline="pat",sink="online+offline"} 3000"#
        ),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l
                .starts_with(r#"feature_connector_parquet_files_written_total{pipeline="part"}"#)),
        "{metrics}"
    );
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
    assert_newest_values(&part_prefix, "part", 3000, 300).await;
    assert_newest_values(&pat_prefix, "pat", 3000, 100).await;
    assert_eq!(
        unique_events(&local_offline_url(&project), "part").await,
        3000
    );
    assert_eq!(
        unique_events(&local_offline_url(&project), "pat").await,
        3000
    );
}
