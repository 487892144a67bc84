//! Any payload, Avro or JSON, through the pipeline's decoder: it must come back as rows or
//! as dead-letter reasons, never as a panic, a hang or an unbounded allocation.
#![no_main]
// A failing set-up or a broken promise panics on purpose: a panic is what the fuzzer reports.
#![allow(clippy::expect_used)]

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use feature_connector::schema::{
    Compatibility, DecoderSpec, PayloadDecoder, PayloadFormat, ReaderSchema,
};
use feature_connector::source::{MessagePosition, SourceMessage};
use libfuzzer_sys::fuzz_target;

const SCHEMA: &str = include_str!("../../schemas/user_profile.avsc");

fn decoder(format: PayloadFormat) -> PayloadDecoder {
    let reader = ReaderSchema::parse(Path::new("user_profile.avsc"), SCHEMA).expect("schema");
    let columns = [
        "user_id",
        "event_time",
        "purchases_30d",
        "sessions_7d",
        "avg_basket_eur",
        "ctr_7d",
        "is_premium",
        "favourite_category",
        "embedding_id",
        "last_review_score",
    ];
    let spec = DecoderSpec {
        topic: "persistent://public/default/fuzz".into(),
        reader,
        format,
        compatibility: Compatibility::Backward,
        columns: columns.iter().map(|c| c.to_string()).collect(),
        entity_keys: vec!["user_id".into()],
        event_time: "event_time".into(),
        reject_non_finite: true,
        max_future_skew_ms: None,
        capacity: 16,
    };
    // Messages without a schema version use the reader schema: no registry call is made.
    let registry = feature_connector::pulsar::SchemaRegistry::new(
        feature_connector::pulsar::PulsarAdmin::new(
            feature_connector::tls::http_client(),
            "http://127.0.0.1:9",
        ),
    );
    PayloadDecoder::new(spec, registry).expect("decoder")
}

fn message(payload: &[u8]) -> SourceMessage {
    SourceMessage {
        position: MessagePosition {
            topic: "persistent://public/default/fuzz".into(),
            offset: (0, 0, -1),
            entry_size: None,
            origin: None,
        },
        payload: payload.to_vec(),
        schema_version: None,
        key: None,
        publish_time_ms: 0,
        properties: Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    });
    // The input split in two payloads, so a bad one next to a good one is exercised too.
    let cut = data
        .first()
        .map_or(0, |b| *b as usize % (data.len().max(1)));
    let messages = [message(&data[..cut]), message(&data[cut..])];
    // Built once (a new HTTP client per run made the target 30x slower); reusing them
    // also exercises the row decoders kept between batches.
    static DECODERS: OnceLock<Mutex<[PayloadDecoder; 2]>> = OnceLock::new();
    let decoders = DECODERS
        .get_or_init(|| Mutex::new([decoder(PayloadFormat::Avro), decoder(PayloadFormat::Json)]));
    let mut decoders = decoders.lock().unwrap_or_else(|e| e.into_inner());
    for decoder in decoders.iter_mut() {
        let decoded = runtime
            .block_on(decoder.decode(&messages))
            .expect("no registry is needed for unversioned messages");
        assert_eq!(
            decoded.rows.num_rows() + decoded.failures.len(),
            messages.len(),
            "every message is a row or a failure"
        );
    }
});
