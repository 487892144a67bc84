//! The bad-input corpus on the real broker: a 5 MB message, a 1 MB string, a string that is
//! not UTF-8, a NaN where the pipeline forbids it and a JSON value nested 100,000 deep each end in the dead-letter topic with a
//! reason (or, for the big but valid string, in Redis), the pipeline keeps going and the
//! connector's memory stays bounded.

use std::time::Duration;

use redis::AsyncCommands;

use crate::common::*;

/// Avro binary encoding of the pieces of a `user_profile` record.
fn zigzag(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn bytes(value: &[u8], out: &mut Vec<u8>) {
    zigzag(value.len() as i64, out);
    out.extend_from_slice(value);
}

/// A `user_profile` datum with the given user id bytes, favourite category and basket.
fn profile(user_id: &[u8], event_time: i64, category: &[u8], basket: f64) -> Vec<u8> {
    let mut out = Vec::new();
    bytes(user_id, &mut out);
    zigzag(event_time, &mut out);
    zigzag(7, &mut out); // purchases_30d
    zigzag(3, &mut out); // sessions_7d
    out.extend_from_slice(&basket.to_le_bytes()); // avg_basket_eur
    out.extend_from_slice(&0.25f32.to_le_bytes()); // ctr_7d
    out.push(1); // is_premium
    bytes(category, &mut out);
    bytes(b"\x01\x02", &mut out); // embedding_id
    zigzag(0, &mut out); // last_review_score: null
    out
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_payloads_are_dead_lettered_and_the_pipeline_goes_on() {
    const BASE: i64 = 1_790_000_000_000;
    let project = Project::new(&redis_url());
    let prefix = unique("hostile");
    project.pipeline_with_schema(
        "hostile",
        "  file: schemas/user_profile.avsc\n  reject_non_finite: true",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    let json_topic = format!("{}-json", project.topic);
    std::fs::write(
        project.path().join("connectors/deep.yaml"),
        format!(
            "name: deep\nsource:\n  topic: {json_topic}\n  subscription: deep\nschema:\n  file: schemas/user_profile.avsc\n  format: json\nentity:\n  keys: [user_id]\n  event_time: event_time\nonline:\n  key_prefix: {prefix}\noffline:\n  enabled: false\n"
        ),
    )
    .expect("pipeline");
    let huge_category = vec![b'x'; 1_000_000];
    publish_raw(
        &project.topic,
        vec![
            vec![0xab; 5_000_000],
            profile(b"user-big", BASE, &huge_category, 12.5),
            profile(b"\xff\xfe-not-utf8", BASE, b"books", 12.5),
            profile(b"user-nan", BASE, b"books", f64::NAN),
            profile(b"user-after", BASE + 1, b"books", 12.5),
        ],
    )
    .await;
    let deep = format!(
        "{{\"user_id\": \"user-deep\", \"event_time\": 1, \"purchases_30d\": {}1{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    publish_raw(&json_topic, vec![deep.into_bytes()]).await;

    let connector = project.start();
    wait_drained(&project.topic, &["hostile"], Duration::from_secs(90)).await;
    wait_drained(&json_topic, &["deep"], Duration::from_secs(60)).await;
    let rss = rss_mb(connector.pid());
    let dead = read_dead_letters(&format!("{}-hostile-DLQ", project.topic), 3).await;
    let deep_dead = read_dead_letters(&format!("{json_topic}-deep-DLQ"), 1).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
    assert_eq!(
        dead.len(),
        3,
        "the 5 MB message, the non-UTF-8 and the NaN one: {dead:?}"
    );
    assert!(
        dead.iter()
            .any(|p| p.get("reason").map(String::as_str) == Some("non_finite_value")),
        "{dead:?}"
    );
    assert!(
        dead.iter()
            .all(|p| p.get("reason").is_some_and(|r| !r.is_empty())),
        "{dead:?}"
    );
    assert_eq!(deep_dead.len(), 1, "{deep_dead:?}");
    println!(
        "hostile corpus: reasons {:?} / {:?}, connector RSS {rss:.0} MB",
        dead.iter()
            .map(|p| p.get("reason").cloned().unwrap_or_default())
            .collect::<Vec<_>>(),
        deep_dead
            .iter()
            .map(|p| p.get("reason").cloned().unwrap_or_default())
            .collect::<Vec<_>>()
    );
    assert!(rss < 400.0, "RSS {rss:.0} MB after the corpus");
    let mut redis = redis(&redis_url()).await;
    let big: Vec<u8> = redis
        .hget(format!("{prefix}:hostile:user-big"), "favourite_category")
        .await
        .expect("hget");
    assert_eq!(
        big.len(),
        huge_category.len(),
        "the 1 MB string is a valid value"
    );
    let after: Option<String> = redis
        .hget(format!("{prefix}:hostile:user-after"), "favourite_category")
        .await
        .expect("hget");
    assert_eq!(
        after.as_deref(),
        Some("books"),
        "events after the bad ones are written"
    );
}

/// A dead-letter topic nobody subscribed to loses its messages once the broker closes the
/// ledger that holds them (a restart, an unload, a rollover) and its retention check runs;
/// the connector's keeping subscription holds them until someone acknowledges them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_outlive_the_ledger_that_held_them() {
    let project = Project::new(&redis_url());
    let prefix = unique("kept");
    project.pipeline(
        "kept",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  enabled: false",
    );
    publish_raw(&project.topic, vec![vec![0xab; 7], vec![0xcd; 3]]).await;
    let connector = project.start();
    wait_drained(&project.topic, &["kept"], Duration::from_secs(60)).await;
    assert_eq!(connector.stop(), 0);
    let dead_letter_topic = format!("{}-kept-DLQ", project.topic);
    assert_eq!(
        subscriptions(&dead_letter_topic).await,
        vec!["kept".to_string()]
    );

    unload_topic(&dead_letter_topic).await;
    // The test broker checks retention every 5 s (services/pulsar/standalone.conf).
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(backlog(&dead_letter_topic, "kept").await, Some(2));
    let dead = read_dead_letters(&dead_letter_topic, 2).await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(
        dead.iter()
            .all(|p| p.get("reason").map(String::as_str) == Some("truncated")),
        "{dead:?}"
    );
}
