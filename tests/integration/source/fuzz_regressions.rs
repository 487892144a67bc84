//! Inputs the fuzzers (scripts/fuzz.sh) or the bad-input corpus found harmful, replayed
//! through the same entry points as fuzz/fuzz_targets/: each must give rows or located
//! errors, never a panic or a crash.

use std::path::{Path, PathBuf};

use feature_connector::config::{load_pipeline_texts, parse_yaml, ServiceConfig};
use feature_connector::schema::{
    Compatibility, DecoderSpec, PayloadDecoder, PayloadFormat, ReaderSchema,
};
use feature_connector::source::{MessagePosition, SourceMessage};

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(target);
    let mut found: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter_map(|p| std::fs::read(&p).ok().map(|bytes| (p, bytes)))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

fn decoder(format: PayloadFormat) -> PayloadDecoder {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/user_profile.avsc");
    let reader = ReaderSchema::load(&path).expect("schema");
    let columns = reader_columns(&reader);
    let spec = DecoderSpec {
        topic: "persistent://public/default/fuzz".into(),
        reader,
        format,
        compatibility: Compatibility::Backward,
        columns,
        entity_keys: vec!["user_id".into()],
        event_time: "event_time".into(),
        reject_non_finite: true,
        max_future_skew_ms: None,
        capacity: 16,
    };
    PayloadDecoder::new(
        spec,
        feature_connector::pulsar::SchemaRegistry::new(
            feature_connector::pulsar::PulsarAdmin::new(
                feature_connector::tls::http_client(),
                "http://127.0.0.1:9",
            ),
        ),
    )
    .expect("decoder")
}

fn reader_columns(reader: &ReaderSchema) -> Vec<String> {
    feature_connector::schema::arrow_schema_of_reader(reader)
        .expect("columns")
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

#[tokio::test]
async fn payload_decoder_regressions_decode_or_fail_cleanly() {
    let found = inputs("payload_decoder");
    assert!(
        !found.is_empty(),
        "the deep-JSON regression input is committed"
    );
    for (path, payload) in found {
        let message = SourceMessage {
            position: MessagePosition {
                topic: "persistent://public/default/fuzz".into(),
                offset: (0, 0, -1),
                entry_size: None,
                origin: None,
            },
            payload,
            schema_version: None,
            key: None,
            publish_time_ms: 0,
            properties: Vec::new(),
        };
        for format in [PayloadFormat::Avro, PayloadFormat::Json] {
            let decoded = decoder(format)
                .decode(std::slice::from_ref(&message))
                .await
                .expect("no registry call for unversioned messages");
            assert_eq!(
                decoded.rows.num_rows() + decoded.failures.len(),
                1,
                "{} ({format:?})",
                path.display()
            );
        }
    }
}

#[test]
fn config_loader_regressions_load_or_report_issues() {
    let found = inputs("config_loader");
    assert!(
        !found.is_empty(),
        "the deep-YAML and alias-bomb inputs are committed"
    );
    // The repository is the project: its schemas are where pipeline files name them.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = root.join("connectors/p.yaml");
    for (path, bytes) in found {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        let _ = parse_yaml::<ServiceConfig>(Path::new("service.yaml"), text);
        if let Err(e) = load_pipeline_texts([(file.as_path(), text)], root) {
            assert!(!e.issues.is_empty(), "{}", path.display());
        }
    }
}
