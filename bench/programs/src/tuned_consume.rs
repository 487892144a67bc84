//! The client's consume ceiling as a tuning user gets it: receive `count` messages from the
//! start of `topic` with a deep receiver queue and acknowledge cumulatively every
//! `ack-every` messages (and the last one), decoding nothing and writing nowhere.
//!
//! `cargo run --profile dist -p feature-connector-bench --bin tuned_consume -- <pulsar-url> <topic> <count> [<receiver-queue> [<ack-every>]]`
//! (defaults 20,000 and 1,000) prints one JSON line with the rate.

use futures::StreamExt;

#[path = "common/bare_consumer.rs"]
mod bare_consumer;

const USAGE: &str =
    "usage: tuned_consume <pulsar-url> <topic> <count> [<receiver-queue> [<ack-every>]]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, topic, count, rest @ ..] = args.as_slice() else {
        return Err(USAGE.into());
    };
    if rest.len() > 2 {
        return Err(USAGE.into());
    }
    let count: u64 = count.parse()?;
    let queue: u32 = rest.first().map_or(Ok(20_000), |q| q.parse())?;
    let ack_every: u64 = rest.get(1).map_or(Ok(1_000), |a| a.parse())?;
    if ack_every == 0 {
        return Err("ack-every must be at least 1".into());
    }
    let mut consumer = bare_consumer::subscribe(url, topic, "tuned-consume", queue).await?;
    let mut received = 0u64;
    let mut started = None;
    let mut unacked = None;
    while received < count {
        let Some(message) = consumer.next().await else {
            break;
        };
        let message = message?;
        started.get_or_insert_with(std::time::Instant::now);
        received += 1;
        if received.is_multiple_of(ack_every) {
            consumer.cumulative_ack(&message).await?;
            unacked = None;
        } else {
            unacked = Some(message);
        }
    }
    if let Some(last) = unacked {
        consumer.cumulative_ack(&last).await?;
    }
    let seconds = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    println!(
        "{{\"contender\":\"pulsar-rs tuned reader, queue {queue}, cumulative ack every {ack_every}\",\"events\":{received},\"seconds\":{seconds:.3},\"events_per_s\":{:.0}}}",
        received as f64 / seconds.max(1e-9)
    );
    Ok(())
}
