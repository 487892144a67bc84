//! `feature-connector produce`: sample Avro events, published with the pipeline's schema so
//! the broker registers it and stamps each message with its schema version.

use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use pulsar::compression::{
    Compression, CompressionLz4, CompressionSnappy, CompressionZlib, CompressionZstd,
};
use pulsar::message::proto::{schema::Type as SchemaType, Schema as ProtoSchema};
use pulsar::producer::ProducerOptions;

use super::ConfigArgs;
use crate::sample::{sample_record, SampleSpec};
use crate::schema::{PayloadFormat, ReaderSchema};
use crate::source::pulsar::PulsarSource;

/// Options of `produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    config: ConfigArgs,
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
    /// Event time of event 0 in epoch ms; default: now minus `count` ms.
    #[arg(long)]
    base_ms: Option<i64>,
    /// Producer batch size (messages per entry); 0 sends every event as its own entry.
    #[arg(long, default_value_t = 0)]
    batch: u32,
    /// Write with this schema file instead of the pipeline's (to produce another version).
    #[arg(long)]
    schema: Option<std::path::PathBuf>,
    /// Publish the events in a scrambled order (event times out of order).
    #[arg(long)]
    shuffle: bool,
    /// Producer compression: none, lz4, zlib, zstd or snappy.
    #[arg(long, default_value = "none", value_parser = ["none", "lz4", "zlib", "zstd", "snappy"])]
    compression: String,
    /// Publish to this topic instead of the pipeline's first named one (e.g. one matching its
    /// `topic_pattern`).
    #[arg(long)]
    topic: Option<String>,
}

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
        return ExitCode::from(super::EXIT_CONFIG);
    };
    let spec = SampleSpec {
        entities: args.entities,
        base_ms: args.base_ms.unwrap_or_else(|| {
            chrono::Utc::now().timestamp_millis() - i64::try_from(args.count).unwrap_or(0)
        }),
        keys: pipeline.entity_keys.clone(),
        event_time: pipeline.event_time.clone(),
    };
    match publish(&service.pulsar, pipeline, &topic, &spec, &args).await {
        Ok(seconds) => {
            let rate = args.count as f64 / seconds.max(1e-9);
            println!(
                "published {} events for {} entities to {} in {seconds:.2} s ({rate:.0} events/s)",
                args.count, args.entities, topic
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
    service: &crate::source::pulsar::PulsarServiceConfig,
    pipeline: &crate::config::PipelineConfig,
    topic: &str,
    spec: &SampleSpec,
    args: &ProduceArgs,
) -> Result<f64, String> {
    let pulsar = PulsarSource::connect(service)
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
    let mut producer = pulsar
        .producer()
        .with_topic(topic)
        .with_options(ProducerOptions {
            schema: Some(ProtoSchema {
                name: pipeline.name.clone(),
                schema_data: schema.json.clone().into_bytes(),
                r#type: schema_type as i32,
                properties: Vec::new(),
            }),
            batch_size: (args.batch > 0).then_some(args.batch),
            // Wait for room instead of failing with SlowDown when the broker is slower.
            block_queue_if_full: true,
            compression: Some(compression(&args.compression)),
            ..Default::default()
        })
        .build()
        .await
        .map_err(|e| format!("cannot create producer on {topic}: {e}"))?;
    let started = Instant::now();
    let mut receipts = Vec::with_capacity(1024);
    let key_field = pipeline.entity_keys.first().cloned().unwrap_or_default();
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&schema.avro)
        .build()
        .map_err(|e| format!("schema cannot be written: {e}"))?;
    let order = crate::sample::event_order(args.start, args.count, args.shuffle);
    for i in order {
        let record = sample_record(&schema.avro, spec, i)?;
        let key =
            crate::sample::entity_key_text(&schema.avro, &key_field, i % spec.entities.max(1))
                .unwrap_or_default();
        let payload = match pipeline.format {
            PayloadFormat::Avro => writer
                .write_value_to_vec(record)
                .map_err(|e| e.to_string())?,
            PayloadFormat::Json => crate::sample::to_json(&record)?.to_string().into_bytes(),
        };
        let receipt = producer
            .create_message()
            .with_content(payload)
            .with_key(key)
            .send_non_blocking()
            .await
            .map_err(|e| format!("send failed: {e}"))?;
        receipts.push(receipt);
        if receipts.len() >= 1024 {
            // Receipts of a half-full producer batch come only once it is sent.
            if args.batch > 0 {
                producer
                    .send_batch()
                    .await
                    .map_err(|e| format!("flushing the batch failed: {e}"))?;
            }
            for receipt in receipts.drain(..) {
                receipt
                    .await
                    .map_err(|e| format!("broker refused an event: {e}"))?;
            }
        }
    }
    if args.batch > 0 {
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
    Ok(started.elapsed().as_secs_f64())
}
