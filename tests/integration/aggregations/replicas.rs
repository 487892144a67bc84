//! Two replicas on a 4-partition topic, one SIGKILLed and the other stopped and restarted
//! while events flow: afterwards every served aggregate equals the events' values (no event
//! counted twice or lost online), and the training set from the table agrees.

use std::time::{Duration, Instant};

use super::{expected, payload, same, write_orders_pipeline, Order, Random, HOUR};
use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_killed_mid_stream_count_every_event_once() {
    let namespace = unique("aggr");
    create_namespace(&namespace, "BACKWARD").await;
    let mut project = Project::new(&redis_url());
    project.topic = format!("persistent://public/{namespace}/orders");
    create_partitioned_topic(&project.topic, 4).await;
    let prefix = write_orders_pipeline(
        &project,
        "offline:\n  url: file://offline\n  rollover_rows: 500\n  rollover_interval: 1s",
    );
    let ports = [free_port(), free_port()];
    let start = |replica: usize, round: usize| {
        let mut env = vec![
            ("FC_INSTANCE_ID".to_string(), format!("r{replica}")),
            (
                "FC_HTTP_BIND".to_string(),
                format!("127.0.0.1:{}", ports[replica]),
            ),
        ];
        if replica == 0 {
            // The first replica keeps the project's serving port.
            env.push((
                "FC_SERVING_BIND".to_string(),
                project
                    .serving_url("")
                    .trim_start_matches("http://")
                    .to_string(),
            ));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        project.start_with_env(&format!("r{replica}-{round}.log"), &env)
    };
    let mut replicas = [Some(start(0, 0)), Some(start(1, 0))];

    // 4,000 events of 40 users over the last 26 hours, in 8 waves while replicas come and go.
    let mut random = Random(23);
    let users: Vec<String> = (0..40).map(|u| format!("user-{u}")).collect();
    let now = chrono::Utc::now().timestamp_millis();
    let orders: Vec<Order> = (0..4_000)
        .map(|_| Order {
            user: users[random.below(40) as usize].clone(),
            at: now - random.below(26 * HOUR),
            amount: (random.below(10) != 0).then(|| random.below(100_000) as f64 / 100.0),
            qty: random.below(20) - 5,
            item: format!("item-{}", random.below(1_000)),
        })
        .collect();
    let topic = project.topic.clone();
    let waves: Vec<Vec<Order>> = orders.chunks(500).map(<[Order]>::to_vec).collect();
    let publisher = tokio::spawn(async move {
        for wave in waves {
            let keyed = wave.iter().map(|o| (o.user.clone(), payload(o))).collect();
            publish_keyed(&topic, keyed).await;
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
    });
    let started = Instant::now();
    let mut round = 1;
    while started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let which = round % 2;
        if let Some(replica) = replicas[which].take() {
            if which == 0 {
                replica.kill_hard();
            } else {
                assert_eq!(replica.stop(), 0, "graceful stop of r{which}");
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        replicas[which] = Some(start(which, round));
        round += 1;
    }
    publisher.await.expect("publisher");
    let partitions: Vec<String> = (0..4)
        .map(|p| format!("{}-partition-{p}", project.topic))
        .collect();
    for partition in &partitions {
        wait_drained(partition, &["orders"], Duration::from_secs(90)).await;
    }

    // Every user's served values equal the events', read while both replicas run.
    for user in &users {
        for attempt in 0.. {
            let before = chrono::Utc::now().timestamp_millis();
            let (status, body) = project
                .serving_get(&format!("/v1/features/orders?user_id={user}"))
                .await
                .expect("http");
            assert_eq!(status, 200, "{body}");
            let after = chrono::Utc::now().timestamp_millis();
            let want = expected(&orders, user, before);
            if want != expected(&orders, user, after) && attempt < 3 {
                continue;
            }
            let body: serde_json::Value = serde_json::from_str(&body).expect("json");
            for (feature, want) in &want {
                let got = &body["features"][feature];
                assert!(
                    same(feature, got, want),
                    "{user} {feature}: served {got}, the events give {want}"
                );
            }
            break;
        }
    }
    for replica in replicas.into_iter().flatten() {
        let (code, log) = replica.stop_with_log();
        assert_eq!(code, 0, "{log}");
    }

    // The table holds every event once: the training set at one time per user equals them.
    let t = chrono::Utc::now().timestamp_millis();
    let csv: String = std::iter::once("user_id,event_timestamp".to_string())
        .chain(users.iter().map(|u| format!("{u},{t}")))
        .collect::<Vec<_>>()
        .join("\n");
    let spine = project.path().join("spine.csv");
    std::fs::write(&spine, csv + "\n").expect("spine");
    let output_file = project.path().join("training.parquet");
    let output = project.run_command(&[
        "offline",
        "training-set",
        "--pipeline",
        "orders",
        "--entities",
        spine.to_str().expect("path"),
        "--output",
        output_file.to_str().expect("path"),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = super::training::read_training_set(&output_file);
    for (user, row) in users.iter().zip(&rows) {
        for (feature, want) in expected(&orders, user, t) {
            let got = row.get(&feature).unwrap_or(&serde_json::Value::Null);
            assert!(
                same(&feature, got, &want),
                "table: {user} {feature} = {got}, the events give {want}"
            );
        }
    }

    // The audit finds every user equal in both stores, its aggregated features included.
    let audit = || {
        let output =
            project.run_command(&["audit", "--pipeline", "orders", "--sample", "all", "--json"]);
        let report: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
                panic!(
                    "audit printed no JSON ({e}): {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            });
        (output.status.code(), report)
    };
    let compared = |report: &serde_json::Value, feature: &str| {
        report["features"]
            .as_array()
            .and_then(|features| features.iter().find(|f| f["feature"] == feature))
            .map(|f| (f["compared"].as_u64(), f["mismatches"].as_u64()))
    };
    let (code, report) = audit();
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["defects"], 0, "{report:#}");
    assert_eq!(report["outcomes"]["equal"], users.len(), "{report:#}");
    for feature in [
        "orders_1h",
        "spend_1d",
        "avg_amount_1d",
        "max_qty_1h",
        "last_items_1d",
        "distinct_items_1d",
    ] {
        assert_eq!(
            compared(&report, feature),
            Some((Some(users.len() as u64), Some(0))),
            "{feature}: {report:#}"
        );
    }

    // One user's tiles lost online: the audit finds that user's aggregated features skewed.
    let mut redis = redis(&redis_url()).await;
    let lost: i64 = redis::cmd("DEL")
        .arg(format!("{prefix}:tiles:orders:{}", users[3]))
        .query_async(&mut redis)
        .await
        .expect("DEL");
    assert_eq!(lost, 1);
    let (code, report) = audit();
    assert_ne!(code, Some(0), "{report:#}");
    assert_eq!(report["defects"], 1, "{report:#}");
    assert_eq!(report["outcomes"]["skew"], 1, "{report:#}");
    let example = &report["examples"]["skew"][0];
    assert_eq!(
        example["entity"]["user_id"],
        users[3].as_str(),
        "{report:#}"
    );
    assert!(
        example["differing"]
            .as_array()
            .is_some_and(|d| d.iter().any(|f| f == "orders_1d")),
        "{report:#}"
    );
}
