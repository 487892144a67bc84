//! Freshness as a user sees it, measured outside the connector: subscribes to Redis keyspace
//! notifications for the benchmark's keys and, for a sample of the writes, reads the value's
//! `_ts` (its event time, which the load generator sets to the wall clock at send) back
//! right away. `now − _ts` is send → visible in Redis, the producer's client, the broker
//! and the connector included.
//!
//! Given a Pulsar URL and topic too, it also reads the topic on a subscription of its own
//! and learns each event's publish time (stamped by the producer's client when the batch
//! leaves it; the event time travels in the message metadata). `now − publish time` is then
//! publish → visible: the broker's and the connector's share only.
//!
//! `cargo run --profile dist -p feature-connector-bench --bin freshness_probe -- <redis-url> <key-pattern> <every-nth> <out.csv> [<pulsar-url> <topic>]`
//! runs until stdin closes (or SIGTERM) and writes `wall_ms,freshness_ms,publish_freshness_ms`
//! lines (the last field empty without a topic or when the event was not seen on it).

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use pulsar::{Consumer, TokioExecutor};
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;

#[path = "common/bare_consumer.rs"]
mod bare_consumer;

/// (entity key, event time ms) → publish time ms, as read from the topic.
type PublishTimes = Arc<Mutex<HashMap<(String, u64), u64>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, pattern, every, out, topic) = match args.as_slice() {
        [_, url, pattern, every, out] => (url, pattern, every, out, None),
        [_, url, pattern, every, out, pulsar, topic] => {
            (url, pattern, every, out, Some((pulsar, topic)))
        }
        _ => return Err(
            "usage: freshness_probe <redis-url> <key-pattern> <every-nth> <out.csv> [<pulsar-url> <topic>]"
                .into(),
        ),
    };
    let every: u64 = every.parse()?;
    let key_prefix = pattern.trim_end_matches('*').to_string();
    let publish_times: PublishTimes = Arc::default();
    if let Some((pulsar_url, topic)) = topic {
        let consumer = bare_consumer::subscribe(pulsar_url, topic, "freshness-probe", 1000).await?;
        tokio::spawn(learn_publish_times(consumer, publish_times.clone()));
    }
    let client = redis::Client::open(url.as_str())?;
    let mut reader = client.get_multiplexed_async_connection().await?;
    // Notifications cost Redis work on every write: put the setting back when done, so that
    // later contenders do not pay for them.
    let (_, previous_notify): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(&mut reader)
        .await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kh")
        .query_async(&mut reader)
        .await?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub
        .psubscribe(format!("__keyspace@0__:{pattern}"))
        .await?;
    let mut notifications = pubsub.on_message();
    // (wall ms, key, event time ms) per sampled read; resolved against the publish times at
    // the end, when the probe's own consumer has surely seen every event.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(i64, String, i64)>(65_536);
    let reads = Arc::new(Semaphore::new(64));
    let mut samples = Vec::new();
    let mut seen = 0u64;
    let mut skipped = 0u64;
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            message = notifications.next() => {
                let Some(message) = message else { break };
                seen += 1;
                if !seen.is_multiple_of(every) {
                    continue;
                }
                let Some(key) = message.get_channel_name().split_once(':').map(|(_, k)| k.to_string()) else {
                    continue;
                };
                let Ok(permit) = reads.clone().try_acquire_owned() else {
                    skipped += 1;
                    continue;
                };
                let mut connection = reader.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let ts: Option<String> = redis::cmd("HGET").arg(&key).arg("_ts").query_async(&mut connection).await.ok().flatten();
                    let now = chrono::Utc::now().timestamp_millis();
                    if let Some(ts) = ts.and_then(|t| t.parse::<i64>().ok()) {
                        let _ = tx.send((now, key, ts)).await;
                    }
                    drop(permit);
                });
            }
            Some(sample) = rx.recv() => samples.push(sample),
            read = stdin.read(&mut buf) => {
                if matches!(read, Ok(0) | Err(_)) { break; }
            }
            _ = term.recv() => break,
        }
    }
    drop(tx);
    while let Ok(Some(sample)) =
        tokio::time::timeout(std::time::Duration::from_secs(1), rx.recv()).await
    {
        samples.push(sample);
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(&previous_notify)
        .query_async(&mut reader)
        .await?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    writeln!(file, "wall_ms,freshness_ms,publish_freshness_ms")?;
    let known = publish_times
        .lock()
        .map_err(|_| "publish-time map poisoned")?;
    let mut resolved = 0u64;
    for (wall, key, ts) in &samples {
        let entity = key.strip_prefix(&key_prefix).unwrap_or(key);
        let published = u64::try_from(*ts)
            .ok()
            .and_then(|t| known.get(&(entity.to_string(), t)));
        match published {
            Some(&published) => {
                resolved += 1;
                writeln!(file, "{wall},{},{}", wall - ts, wall - published as i64)?;
            }
            None => writeln!(file, "{wall},{},", wall - ts)?,
        }
    }
    file.flush()?;
    eprintln!(
        "freshness_probe: {seen} notifications, every {every}th read back, {skipped} skipped (64 reads in flight), {} samples, {resolved} with a publish time ({} events seen on the topic)",
        samples.len(),
        known.len()
    );
    Ok(())
}

/// Records every event's publish time; acknowledges cumulatively now and then so the
/// subscription does not hold the topic's backlog.
async fn learn_publish_times(mut consumer: Consumer<Vec<u8>, TokioExecutor>, known: PublishTimes) {
    let mut since_ack = 0u32;
    while let Some(Ok(message)) = consumer.next().await {
        let metadata = message.metadata();
        if let (Some(key), Some(event_time)) = (metadata.partition_key.clone(), metadata.event_time)
        {
            if let Ok(mut known) = known.lock() {
                known.insert((key, event_time), metadata.publish_time);
            }
        }
        since_ack += 1;
        if since_ack >= 1000 {
            since_ack = 0;
            let _ = consumer.cumulative_ack(&message).await;
        }
    }
}
