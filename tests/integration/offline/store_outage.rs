//! Pipelines in one process do not stall each other: one whose object store is missing
//! keeps retrying on its own while the others carry on (and, with `delivery: per_sink`, its
//! own online lane too), and `/readyz` names the store at fault until it answers.

use std::time::Duration;

use crate::common::*;

fn pipeline_yaml(
    name: &str,
    topic: &str,
    delivery: &str,
    prefix: &str,
    offline_url: &str,
) -> String {
    format!(
        "name: {name}\nsource:\n  topic: {topic}\n  subscription: {name}\n  delivery: {delivery}\nschema:\n  file: schemas/user_profile.avsc\nentity:\n  keys: [user_id]\n  event_time: event_time\nonline:\n  key_prefix: {prefix}\noffline:\n  url: {offline_url}\n  rollover_rows: 500\n  rollover_interval: 1s\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_with_its_store_down_does_not_stall_the_others() {
    const EVENTS: u64 = 2_000;
    const ENTITIES: u64 = 200;
    let project = Project::new(&redis_url());
    let (good_topic, stuck_topic) = (project.topic.clone(), format!("{}-stuck", project.topic));
    let (good_prefix, stuck_prefix) = (unique("good"), unique("stuck"));
    // A bucket that does not exist yet: every put and listing fails until it is created.
    let bucket = unique("later").replace('_', "-");
    std::fs::write(
        project.path().join("connectors/good.yaml"),
        // The default delivery: one subscription `good` feeds both sinks.
        pipeline_yaml(
            "good",
            &good_topic,
            "shared",
            &good_prefix,
            "file://offline",
        ),
    )
    .expect("pipeline");
    std::fs::write(
        project.path().join("connectors/stuck.yaml"),
        // One subscription per sink, so its online sink does not wait for the store.
        pipeline_yaml(
            "stuck",
            &stuck_topic,
            "per_sink",
            &stuck_prefix,
            &format!("s3://{bucket}/features"),
        ),
    )
    .expect("pipeline");
    project.produce("good", EVENTS, ENTITIES, BASE, 0);
    project.produce_with(
        "stuck",
        &[
            "--count",
            "2000",
            "--entities",
            "200",
            "--base-ms",
            &BASE.to_string(),
        ],
    );
    let connector = project.start();
    wait_drained(&good_topic, &["good"], Duration::from_secs(60)).await;
    wait_drained(&stuck_topic, &["stuck-online"], Duration::from_secs(60)).await;
    assert_eq!(backlog(&stuck_topic, "stuck-offline").await, Some(EVENTS));
    let (status, body) = project.http_get("/readyz").await.expect("readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("offline store of `stuck`"), "{body}");
    assert!(!body.contains("good"), "{body}");

    let created = feature_connector::tls::http_client()
        .put(format!("{}/{bucket}", s3_endpoint()))
        .send()
        .await
        .expect("create bucket");
    assert!(created.status().is_success(), "{}", created.status());
    wait_drained(&stuck_topic, &["stuck-offline"], Duration::from_secs(90)).await;
    wait_until("/readyz to turn ready", Duration::from_secs(30), || async {
        project
            .http_get("/readyz")
            .await
            .is_some_and(|(status, _)| status == 200)
    })
    .await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
    assert_newest_values(&good_prefix, "good", EVENTS, ENTITIES).await;
    assert_newest_values(&stuck_prefix, "stuck", EVENTS, ENTITIES).await;
    let rows: usize = read_table(&format!("s3://{bucket}/features"), "stuck")
        .await
        .iter()
        .map(|(_, batch)| batch.num_rows())
        .sum();
    assert_eq!(rows, EVENTS as usize);
}
