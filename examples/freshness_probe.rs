//! Freshness as a user sees it, measured outside the connector: subscribes to Redis keyspace
//! notifications for the benchmark's keys and, for a sample of the writes, reads the value's
//! `_ts` (its event time, which the load generator sets to the wall clock at send) back
//! right away. `now − _ts` is publish → visible in Redis, broker and connector included.
//!
//! `cargo run --release --example freshness_probe -- <redis-url> <key-pattern> <every-nth> <out.csv>`
//! runs until stdin closes (or SIGTERM) and writes `wall_ms,freshness_ms` lines.

use std::io::Write;
use std::sync::Arc;

use futures::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, pattern, every, out] = args.as_slice() else {
        return Err(
            "usage: freshness_probe <redis-url> <key-pattern> <every-nth> <out.csv>".into(),
        );
    };
    let every: u64 = every.parse()?;
    let client = redis::Client::open(url.as_str())?;
    let mut reader = client.get_multiplexed_async_connection().await?;
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
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(i64, i64)>(65_536);
    let reads = Arc::new(Semaphore::new(64));
    let mut seen = 0u64;
    let mut skipped = 0u64;
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    writeln!(file, "wall_ms,freshness_ms")?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            message = notifications.next() => {
                let Some(message) = message else { break };
                seen += 1;
                if seen % every != 0 {
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
                        let _ = tx.send((now, now - ts)).await;
                    }
                    drop(permit);
                });
            }
            Some((wall, freshness)) = rx.recv() => {
                writeln!(file, "{wall},{freshness}")?;
            }
            read = stdin.read(&mut buf) => {
                if matches!(read, Ok(0) | Err(_)) { break; }
            }
            _ = term.recv() => break,
        }
    }
    drop(tx);
    while let Ok(Some((wall, freshness))) =
        tokio::time::timeout(std::time::Duration::from_secs(1), rx.recv()).await
    {
        writeln!(file, "{wall},{freshness}")?;
    }
    file.flush()?;
    eprintln!("freshness_probe: {seen} notifications, every {every}th read back, {skipped} skipped (64 reads in flight)");
    Ok(())
}
