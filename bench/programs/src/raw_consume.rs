//! The broker's consume ceiling through the same client library: receive and acknowledge
//! `count` messages from the start of `topic`, decoding nothing and writing nowhere.
//!
//! `cargo run --profile dist -p feature-connector-bench --bin raw_consume -- <pulsar-url> <topic> <count>`
//! prints one JSON line with the rate, and the delivery latency (now − the message's publish
//! time) at p50/p99: meaningful while a producer is publishing live, as the broker's own
//! share of the freshness figures.

use futures::StreamExt;

#[path = "common/bare_consumer.rs"]
mod bare_consumer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, topic, count] = args.as_slice() else {
        return Err("usage: raw_consume <pulsar-url> <topic> <count>".into());
    };
    let count: u64 = count.parse()?;
    let mut consumer = bare_consumer::subscribe(url, topic, "raw-consume", 1000).await?;
    let mut received = 0u64;
    let mut started = None;
    let mut latencies_ms = Vec::with_capacity(count as usize);
    while received < count {
        let Some(message) = consumer.next().await else {
            break;
        };
        let message = message?;
        started.get_or_insert_with(std::time::Instant::now);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64;
        latencies_ms.push(now_ms - message.metadata().publish_time as i64);
        consumer.ack(&message).await?;
        received += 1;
    }
    let seconds = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    latencies_ms.sort_unstable();
    let at = |q: f64| {
        latencies_ms
            .get(
                ((latencies_ms.len() as f64 * q) as usize)
                    .min(latencies_ms.len().saturating_sub(1)),
            )
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{{\"contender\":\"pulsar-rs, ack per message, queue 1,000\",\"events\":{received},\"seconds\":{seconds:.3},\"events_per_s\":{:.0},\"delivery_p50_ms\":{},\"delivery_p99_ms\":{}}}",
        received as f64 / seconds.max(1e-9),
        at(0.5),
        at(0.99)
    );
    Ok(())
}
