//! `feature-connector produce` (this crate's binary): sample events, Avro or JSON as the
//! pipeline reads, published with the pipeline's schema so the broker registers it and stamps
//! each message with its schema version.

use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use pulsar::compression::{
    Compression, CompressionLz4, CompressionSnappy, CompressionZlib, CompressionZstd,
};
use pulsar::message::proto::{schema::Type as SchemaType, Schema as ProtoSchema};
use pulsar::producer::ProducerOptions;

use feature_connector::cli::{ConfigArgs, EXIT_CONFIG};
use feature_connector::schema::{PayloadFormat, ReaderSchema};

use crate::pacing;
use crate::sample::{sample_record_at, SampleSpec};

/// Options of `produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Where the service file and the pipeline files are.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Pipeline whose topic, schema, keys and event time to use.
    #[arg(long)]
    pipeline: String,
    /// Number of events.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// Number of distinct entities (event i belongs to entity i % entities).
    #[arg(long, default_value_t = 1_000)]
    entities: u64,
    /// Index of the first event (to continue a series).
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Event time of event 0 in epoch ms; default: now minus `count` times the step.
    #[arg(long)]
    base_ms: Option<i64>,
    /// Milliseconds between the event times of consecutive events (e.g. 259 spreads 10
    /// million events over 30 days).
    #[arg(long, default_value_t = 1)]
    time_step_ms: i64,
    /// Producer batch size (messages per entry); 0 sends every event as its own entry.
    #[arg(long, default_value_t = 0)]
    batch: u32,
    /// Write with this schema file instead of the pipeline's (to produce another version).
    #[arg(long)]
    schema: Option<std::path::PathBuf>,
    /// Publish the events in a scrambled order (event times out of order).
    #[arg(long)]
    shuffle: bool,
    /// Producers publishing side by side (each entity always through the same one); more
    /// than one keeps several batches in flight, which one pulsar-rs producer does not.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    producers: u16,
    /// Producer compression: none, lz4, zlib, zstd or snappy.
    #[arg(long, default_value = "none", value_parser = ["none", "lz4", "zlib", "zstd", "snappy"])]
    compression: String,
    /// Publish to this topic instead of the pipeline's first named one (e.g. one matching its
    /// `topic_pattern`).
    #[arg(long)]
    topic: Option<String>,
    /// How long an event may wait for the broker's receipt, resends after reconnecting
    /// included, before the run fails (long enough to ride out a broker restart).
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    send_timeout: std::time::Duration,
    /// Entity keys Zipf-distributed with this exponent (e.g. 1.1) instead of round robin.
    #[arg(long)]
    zipf: Option<f64>,
    /// Event time = the wall clock at send (for freshness measurements).
    #[arg(long)]
    live_event_time: bool,
    /// Send at this many events/s (open loop) instead of as fast as possible.
    #[arg(long, conflicts_with = "rate_schedule")]
    rate: Option<f64>,
    /// Open-loop phases `rate:duration,...`, e.g. `20000:20s,200000:10s,20000:10s`;
    /// replaces `--count`.
    #[arg(long)]
    rate_schedule: Option<String>,
    /// Send the first event at this wall-clock time (epoch ms), once the producers are
    /// connected: producers in different processes (e.g. one per region) then start together.
    #[arg(long)]
    start_at: Option<i64>,
}

/// Most events sent but not yet confirmed by the broker, per producer.
const RECEIPT_WINDOW: usize = 8192;

/// Events generated but not yet handed to a producer, per producer.
const PRODUCER_QUEUE: usize = 1024;

fn compression(name: &str) -> Compression {
    match name {
        "lz4" => Compression::Lz4(CompressionLz4::default()),
        "zlib" => Compression::Zlib(CompressionZlib::default()),
        "zstd" => Compression::Zstd(CompressionZstd::default()),
        "snappy" => Compression::Snappy(CompressionSnappy::default()),
        _ => Compression::None,
    }
}

/// Publishes the events and waits for every receipt.
pub async fn produce(args: ProduceArgs) -> ExitCode {
    let (service, pipeline) = match args.config.load_pipeline(&args.pipeline) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let pipeline = &pipeline;
    let Some(topic) = args
        .topic
        .clone()
        .or_else(|| pipeline.source.primary_topic().map(str::to_string))
    else {
        eprintln!(
            "error: pipeline `{}` names no topic ({}); pass --topic",
            pipeline.name,
            pipeline.source.describe_topics()
        );
        return ExitCode::from(EXIT_CONFIG);
    };
    let phases = match (&args.rate_schedule, args.rate) {
        (Some(text), _) => match pacing::parse_schedule(text) {
            Ok(phases) => Some(phases),
            Err(e) => {
                eprintln!("error: --rate-schedule {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
        (None, Some(rate)) if rate > 0.0 && rate.is_finite() => Some(vec![pacing::Phase {
            rate,
            duration: std::time::Duration::from_secs_f64(args.count as f64 / rate),
        }]),
        (None, Some(_)) => {
            eprintln!("error: --rate must be above 0");
            return ExitCode::from(EXIT_CONFIG);
        }
        (None, None) => None,
    };
    let count = phases
        .as_deref()
        .map_or(args.count, pacing::schedule_events);
    let spec = SampleSpec {
        distribution: match args.zipf {
            Some(s) => crate::sample::KeyDistribution::zipf(args.entities, s),
            None => crate::sample::KeyDistribution::RoundRobin,
        },
        live_event_time: args.live_event_time,
        entities: args.entities,
        base_ms: args.base_ms.unwrap_or_else(|| {
            chrono::Utc::now().timestamp_millis()
                - i64::try_from(count).unwrap_or(0) * args.time_step_ms
        }),
        time_step_ms: args.time_step_ms,
        keys: pipeline.entity_keys.clone(),
        event_time: pipeline.event_time.clone(),
    };
    let pacer = phases.as_deref().map(pacing::Pacer::new);
    match publish(
        &service.pulsar,
        pipeline,
        &topic,
        &spec,
        &args,
        count,
        pacer,
    )
    .await
    {
        Ok(seconds) => {
            let rate = count as f64 / seconds.max(1e-9);
            println!(
                "published {count} events for {} entities to {} in {seconds:.2} s ({rate:.0} events/s)",
                args.entities, topic
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn publish(
    service: &feature_connector::pulsar::PulsarServiceConfig,
    pipeline: &feature_connector::config::PipelineConfig,
    topic: &str,
    spec: &SampleSpec,
    args: &ProduceArgs,
    count: u64,
    pacer: Option<pacing::Pacer>,
) -> Result<f64, String> {
    let pulsar = service
        .connect_with_operation_timeout(args.send_timeout)
        .await
        .map_err(|e| e.to_string())?;
    let override_schema = match &args.schema {
        Some(path) => Some(ReaderSchema::load(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let schema = override_schema.as_ref().unwrap_or(&pipeline.schema);
    let schema_type = match pipeline.format {
        PayloadFormat::Avro => SchemaType::Avro,
        PayloadFormat::Json => SchemaType::Json,
    };
    let options = ProducerOptions {
        schema: Some(ProtoSchema {
            name: pipeline.name.clone(),
            schema_data: schema.json.clone().into_bytes(),
            r#type: schema_type as i32,
            properties: Vec::new(),
        }),
        batch_size: (args.batch > 0).then_some(args.batch),
        // As Java's default batching delay: a partly filled batch leaves after 1 ms, so
        // batching does not add latency at low rates.
        batch_timeout: (args.batch > 0).then_some(std::time::Duration::from_millis(1)),
        // Wait for room instead of failing with SlowDown when the broker is slower.
        block_queue_if_full: true,
        compression: Some(compression(&args.compression)),
        ..Default::default()
    };
    // pulsar-rs keeps one batch per producer in flight (it awaits each batch's receipt
    // before sending the next), so one producer tops out at batch size / broker round trip;
    // several producers keep several batches in flight.
    let mut lanes = Vec::with_capacity(usize::from(args.producers));
    let mut senders = tokio::task::JoinSet::new();
    for _ in 0..usize::from(args.producers) {
        let producer = pulsar
            .producer()
            .with_topic(topic)
            .with_options(options.clone())
            .build()
            .await
            .map_err(|e| format!("cannot create producer on {topic}: {e}"))?;
        let (tx, rx) = tokio::sync::mpsc::channel(PRODUCER_QUEUE);
        lanes.push(tx);
        senders.spawn(send_all(producer, rx, args.batch > 0));
    }
    if let Some(at) = args.start_at {
        let wait_ms = at - chrono::Utc::now().timestamp_millis();
        if wait_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(wait_ms.unsigned_abs())).await;
        }
    }
    // Paced from the first send, not from start-up.
    let pacer = pacer.map(pacing::Pacer::restarted);
    let started = Instant::now();
    let key_field = pipeline.entity_keys.first().cloned().unwrap_or_default();
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&schema.avro)
        .build()
        .map_err(|e| format!("schema cannot be written: {e}"))?;
    let order = crate::sample::event_order(args.start, count, args.shuffle);
    // Per phase: (events, first send, last send), epoch ms — reported so a benchmark can
    // tell the rate it got from the rate it asked for.
    let mut sent: Vec<(u64, i64, i64)> = vec![(0, 0, 0); pacer.as_ref().map_or(0, |p| p.phases())];
    for (n, i) in order.enumerate() {
        if let Some(pacer) = &pacer {
            pacer.wait(n as u64).await;
            let now = chrono::Utc::now().timestamp_millis();
            if let Some(phase) = sent.get_mut(pacer.phase_of(n as u64)) {
                if phase.0 == 0 {
                    phase.1 = now;
                }
                *phase = (phase.0 + 1, phase.1, now);
            }
        }
        let event_time = spec.event_time_ms(i);
        let entity = spec.entity(i);
        let record = sample_record_at(&schema.avro, spec, i, entity, event_time)?;
        let key =
            crate::sample::entity_key_text(&schema.avro, &key_field, entity).unwrap_or_default();
        let payload = match pipeline.format {
            PayloadFormat::Avro => writer
                .write_value_to_vec(record)
                .map_err(|e| e.to_string())?,
            PayloadFormat::Json => crate::sample::to_json(&record)?.to_string().into_bytes(),
        };
        // One entity always goes through the same producer, so its events stay in order.
        let lane = &lanes[(entity % lanes.len() as u64) as usize];
        let event_time = u64::try_from(event_time).unwrap_or(0);
        if lane.send((key, payload, event_time)).await.is_err() {
            break;
        }
    }
    drop(lanes);
    while let Some(finished) = senders.join_next().await {
        finished.map_err(|e| format!("a producer task failed: {e}"))??;
    }
    for (index, (events, first, last)) in sent.iter().enumerate() {
        let seconds = (last - first).max(1) as f64 / 1000.0;
        println!(
            "phase {index}: {events} events sent from {first} to {last} (epoch ms), {:.0} events/s",
            *events as f64 / seconds
        );
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Sends what arrives on `events` through one producer, keeping a sliding window of
/// unconfirmed sends, then flushes and waits for every receipt.
async fn send_all(
    mut producer: pulsar::Producer<pulsar::TokioExecutor>,
    mut events: tokio::sync::mpsc::Receiver<(String, Vec<u8>, u64)>,
    batched: bool,
) -> Result<(), String> {
    // Waiting for all receipts every so often stalled the sender and turned a steady rate
    // into bursts; a window keeps sending while the oldest receipts come back.
    let mut receipts = std::collections::VecDeque::with_capacity(RECEIPT_WINDOW);
    while let Some((key, payload, event_time)) = events.recv().await {
        // The event time also goes into the message metadata, where readers of the topic
        // (the benchmark's freshness probe) find it without decoding the payload.
        let receipt = producer
            .create_message()
            .with_content(payload)
            .with_key(key)
            .event_time(event_time)
            .send_non_blocking()
            .await
            .map_err(|e| format!("send failed: {e}"))?;
        receipts.push_back(receipt);
        if receipts.len() >= RECEIPT_WINDOW {
            if let Some(oldest) = receipts.pop_front() {
                oldest
                    .await
                    .map_err(|e| format!("broker refused an event: {e}"))?;
            }
        }
    }
    if batched {
        producer
            .send_batch()
            .await
            .map_err(|e| format!("flushing the batch failed: {e}"))?;
    }
    for receipt in receipts {
        receipt
            .await
            .map_err(|e| format!("broker refused an event: {e}"))?;
    }
    producer
        .close()
        .await
        .map_err(|e| format!("closing the producer failed: {e}"))
}
