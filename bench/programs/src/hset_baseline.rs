//! Redis's own cost of storing what the connector stores, without the connector's script:
//! `writes` plain `HSET`s of one hash per entity with the fields the connector's native
//! layout gives the benchmark's events (bench/schemas/bench_features.avsc: its 10 features
//! and `_ts`; the entity id is in the key), values of the same sizes, pipelined, no
//! latest-wins check. The keys are `<prefix>:bench:entity-<n>`, `n` going round
//! `0..entities`: as many hashes are created, and then overwritten, as the connector's run
//! leaves behind.
//!
//! `cargo run --profile dist -p feature-connector-bench --bin hset_baseline -- <redis-url> <key-prefix> <writes> <entities> [<pipeline>]`
//! (pipeline default 500 commands) prints one JSON line with the rate.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

const USAGE: &str =
    "usage: hset_baseline <redis-url> <key-prefix> <writes> <entities> [<pipeline>]";

/// The fields and values of write `i`, in the order the connector's script sets them, as
/// the native layout renders the load generator's event `i` (its value rules: long
/// `i × (position + 1)`, int `i mod 1000 + position`, double and float `i / 4 + position`,
/// boolean `i` even, string `<name>-<i>`).
fn fields(i: u64, event_time_ms: u64) -> [(&'static str, String); 11] {
    let quarter = i as f64 / 4.0;
    [
        ("_ts", event_time_ms.to_string()),
        ("clicks_1h", (i * 3).to_string()),
        ("views_1h", (i * 4).to_string()),
        ("last_item_id", (i * 5).to_string()),
        ("sessions_7d", (i % 1000 + 5).to_string()),
        // Debug, as Arrow formats floats: whole values keep their `.0`.
        ("spend_30d", format!("{:?}", quarter + 6.0)),
        ("score", format!("{:?}", quarter + 7.0)),
        ("ctr_7d", format!("{:?}", (quarter + 8.0) as f32)),
        ("is_active", i.is_multiple_of(2).to_string()),
        ("country", format!("country-{i}")),
        ("segment", format!("segment-{i}")),
    ]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, prefix, writes, entities, rest @ ..] = args.as_slice() else {
        return Err(USAGE.into());
    };
    if rest.len() > 1 {
        return Err(USAGE.into());
    }
    let writes: u64 = writes.parse()?;
    let entities: u64 = entities.parse()?;
    let pipeline: u64 = rest.first().map_or(Ok(500), |p| p.parse())?;
    if entities == 0 || pipeline == 0 {
        return Err("entities and pipeline must be at least 1".into());
    }
    let mut connection = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let base_ms = u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis())?;
    let started = Instant::now();
    let mut written = 0;
    while written < writes {
        let end = writes.min(written + pipeline);
        let mut pipe = redis::pipe();
        for i in written..end {
            pipe.cmd("HSET")
                .arg(format!("{prefix}:bench:entity-{}", i % entities));
            for (field, value) in fields(i, base_ms + i) {
                pipe.arg(field).arg(value);
            }
            pipe.ignore();
        }
        pipe.query_async::<()>(&mut connection).await?;
        written = end;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{{\"contender\":\"pipelined plain HSET, {pipeline} per pipeline\",\"events\":{writes},\"seconds\":{seconds:.3},\"events_per_s\":{:.0}}}",
        writes as f64 / seconds.max(1e-9)
    );
    Ok(())
}
