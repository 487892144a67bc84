//! Builds a table's history for the offline start-up benchmark (bench/offline_startup.py):
//! commits `--rollovers` rollovers of `--rows` rows each through the connector's own offline
//! sink, back to back, as a pipeline on a `--partitions`-partition topic would; then
//! `--paced` more, one every `--pace-ms` (a pipeline's real commit rate is one per rollover
//! interval, seconds apart). Prints the commit latencies (each rollover's write → committed)
//! of both phases as JSON.
//!
//!   cargo run --profile dist -p feature-connector-bench --bin offline_history -- \
//!       --store s3://bucket/prefix --pipeline history --rollovers 10000 --rows 20

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use feature_connector::delta::{DeltaSink, DeltaSinkConfig, TableRoot, TableSpec};
use feature_connector::record::RowBatch;
use feature_connector::sink::Sink;
use feature_connector::source::MessagePosition;
use tokio_util::sync::CancellationToken;

fn flag(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let store_url = flag(&args, "--store", "file:///tmp/offline-history");
    let pipeline = flag(&args, "--pipeline", "history");
    let rollovers: usize = flag(&args, "--rollovers", "100").parse()?;
    let rows: usize = flag(&args, "--rows", "20").parse()?;
    let partitions: usize = flag(&args, "--partitions", "4").parse()?;
    let topic = flag(&args, "--topic", "persistent://public/default/history");
    let paced: usize = flag(&args, "--paced", "0").parse()?;
    let pace = std::time::Duration::from_millis(flag(&args, "--pace-ms", "500").parse()?);
    let options: BTreeMap<String, String> = [
        (
            "aws_endpoint",
            std::env::var("S3_ENDPOINT").unwrap_or_default(),
        ),
        ("aws_allow_http", "true".into()),
        ("aws_region", "us-east-1".into()),
        ("aws_virtual_hosted_style_request", "false".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();

    let schema = Arc::new(Schema::new(vec![
        Field::new("user_id", DataType::Utf8, false),
        Field::new("event_time", DataType::Int64, false),
        Field::new("value", DataType::Float64, false),
    ]));
    let config: DeltaSinkConfig =
        serde_saphyr::from_str(&format!("rollover_rows: {rows}\nrollover_interval: 1h\n"))?;
    let store = TableRoot::open(&store_url, Path::new("."), &options)?;
    let spec = TableSpec::new(&store, &pipeline, &schema, "event_time", &config)?;
    let mut sink = DeltaSink::new(spec, config, None, CancellationToken::new());
    sink.start().await?;

    let base_ms = 1_790_000_000_000_i64;
    let mut latencies = Vec::with_capacity(rollovers);
    let mut paced_latencies = Vec::with_capacity(paced);
    let mut entry = vec![0u64; partitions];
    for rollover in 0..rollovers + paced {
        if rollover >= rollovers {
            tokio::time::sleep(pace).await;
        }
        let partition = rollover % partitions;
        let start = rollover * rows;
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    (start..start + rows).map(|i| format!("user-{}", i % 1000)),
                )),
                Arc::new(Int64Array::from_iter_values(
                    (start..start + rows).map(|i| base_ms + i as i64 * 1000),
                )),
                Arc::new(Float64Array::from_iter_values(
                    (start..start + rows).map(|i| i as f64),
                )),
            ],
        )?;
        let positions: Vec<MessagePosition> = (0..rows)
            .map(|_| {
                entry[partition] += 1;
                MessagePosition {
                    topic: format!("{topic}-partition-{partition}").into(),
                    offset: (1, entry[partition], -1),
                    entry_size: None,
                    origin: None,
                }
            })
            .collect();
        let started = Instant::now();
        let durable = sink
            .write(RowBatch {
                rows: batch,
                publish_times_ms: vec![u64::try_from(base_ms)?; rows],
                row_positions: (0..rows).collect(),
                positions,
            })
            .await?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if rollover < rollovers {
            latencies.push(ms);
        } else {
            paced_latencies.push(ms);
        }
        if durable.len() != rows {
            return Err(format!("rollover {rollover}: {} durable of {rows}", durable.len()).into());
        }
        if (rollover + 1) % 500 == 0 {
            eprintln!("{} rollovers committed", rollover + 1);
        }
    }
    sink.flush().await?;
    println!(
        "{}",
        serde_json::json!({
            "rollovers": rollovers,
            "rows_per_rollover": rows,
            "commit_ms": summary(&latencies),
            "paced": paced,
            "pace_ms": pace.as_millis(),
            "paced_commit_ms": summary(&paced_latencies),
            "mean_ms_per_tenth": latencies
                .chunks(latencies.len().div_ceil(10).max(1))
                .map(|c| (c.iter().sum::<f64>() / c.len() as f64 * 10.0).round() / 10.0)
                .collect::<Vec<_>>(),
        })
    );
    Ok(())
}

/// p50 / p90 / p99 / max / mean of `latencies` (ms), as JSON.
fn summary(latencies: &[f64]) -> serde_json::Value {
    if latencies.is_empty() {
        return serde_json::Value::Null;
    }
    let mut sorted = latencies.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pick = |q: f64| sorted[((sorted.len() as f64 - 1.0) * q).round() as usize];
    serde_json::json!({"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": pick(1.0),
                       "mean": latencies.iter().sum::<f64>() / latencies.len() as f64})
}
