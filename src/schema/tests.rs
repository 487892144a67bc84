//! The schema module's files together: the payload decoder with its row decoders, writer
//! schema compatibility and dead-letter reasons; bad payloads fail alone, rows keep their order.

use apache_avro::types::Value;
use arrow::array::AsArray;
use arrow::datatypes::Int64Type;

use super::decoder::*;
use super::payload_formats::PayloadFormat;
use super::reason::DeadLetterReason;
use super::{Compatibility, ReaderSchema};
use crate::pulsar::PulsarAdmin;
use crate::pulsar::SchemaRegistry;
use crate::source::MessagePosition;
use crate::source::SourceMessage;

const SCHEMA: &str = r#"{"type":"record","name":"r","fields":[
    {"name":"id","type":"string"},{"name":"n","type":"long"}]}"#;

fn message(payload: Vec<u8>) -> SourceMessage {
    SourceMessage {
        position: MessagePosition {
            topic: "persistent://public/default/t".into(),
            offset: (0, 0, -1),
            entry_size: None,
            origin: None,
        },
        payload,
        schema_version: None,
        key: None,
        publish_time_ms: 0,
        properties: Vec::new(),
    }
}

fn datum(schema: &apache_avro::Schema, id: &str, n: i64) -> Vec<u8> {
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(schema)
        .build()
        .unwrap();
    writer
        .write_value_to_vec(Value::Record(vec![
            ("id".into(), Value::String(id.into())),
            ("n".into(), Value::Long(n)),
        ]))
        .unwrap()
}

#[tokio::test]
async fn bad_payloads_fail_alone_and_good_rows_keep_their_order() {
    let reader = ReaderSchema::parse(std::path::Path::new("t.avsc"), SCHEMA).unwrap();
    let registry = SchemaRegistry::new(PulsarAdmin::new(
        crate::tls::http_client(),
        "http://127.0.0.1:9",
    ));
    let spec = DecoderSpec {
        topic: "persistent://public/default/t".into(),
        reader: reader.clone(),
        format: PayloadFormat::Avro,
        compatibility: Compatibility::Backward,
        columns: vec!["n".into(), "id".into()],
        entity_keys: vec!["id".into()],
        event_time: "n".into(),
        reject_non_finite: false,
        max_future_skew_ms: None,
        capacity: 16,
    };
    let mut decoder = PayloadDecoder::new(spec, registry).unwrap();
    let good = |n| message(datum(&reader.avro, &format!("e{n}"), n));
    let mut truncated = datum(&reader.avro, "long-enough-id", 7);
    truncated.truncate(5);
    let mut trailing = datum(&reader.avro, "x", 8);
    trailing.extend_from_slice(&[1, 2, 3]);
    let messages = vec![
        good(1),
        message(vec![
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ]),
        good(2),
        message(truncated),
        message(trailing),
        good(3),
    ];
    let decoded = decoder.decode(&messages).await.unwrap();
    assert_eq!(decoded.row_messages, vec![0, 2, 5]);
    let n = decoded.rows.column(0).as_primitive::<Int64Type>();
    assert_eq!(n.values(), &[1, 2, 3]);
    assert_eq!(decoded.rows.column(1).as_string::<i32>().value(2), "e3");
    let failed: Vec<(usize, &str)> = decoded
        .failures
        .iter()
        .map(|f| (f.index, f.reason.as_str()))
        .collect();
    assert_eq!(
        failed,
        vec![(1, "undecodable"), (3, "truncated"), (4, "trailing_bytes")]
    );
    assert!(
        decoded.failures[2].detail.contains("trailing bytes"),
        "{:?}",
        decoded.failures[2]
    );
}

#[tokio::test]
async fn non_finite_features_are_rejected_when_the_pipeline_says_so() {
    const FLOATS: &str = r#"{"type":"record","name":"f","fields":[
        {"name":"id","type":"string"},{"name":"t","type":"long"},
        {"name":"x","type":"double"},{"name":"y","type":["null","float"],"default":null}]}"#;
    let reader = ReaderSchema::parse(std::path::Path::new("f.avsc"), FLOATS).unwrap();
    let encode = |x: f64, y: Option<f32>| {
        let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&reader.avro)
            .build()
            .unwrap();
        let y = match y {
            Some(y) => Value::Union(1, Box::new(Value::Float(y))),
            None => Value::Union(0, Box::new(Value::Null)),
        };
        message(
            writer
                .write_value_to_vec(Value::Record(vec![
                    ("id".into(), Value::String("e".into())),
                    ("t".into(), Value::Long(1)),
                    ("x".into(), Value::Double(x)),
                    ("y".into(), y),
                ]))
                .unwrap(),
        )
    };
    let messages = vec![
        encode(1.5, None),
        encode(f64::NAN, Some(1.0)),
        encode(2.0, Some(f32::INFINITY)),
        encode(3.0, Some(0.5)),
    ];
    for (reject, rows, failed) in [
        (true, vec![0, 3], vec![1, 2]),
        (false, vec![0, 1, 2, 3], vec![]),
    ] {
        let spec = DecoderSpec {
            topic: "persistent://public/default/f".into(),
            reader: reader.clone(),
            format: PayloadFormat::Avro,
            compatibility: Compatibility::Backward,
            columns: vec!["id".into(), "t".into(), "x".into(), "y".into()],
            entity_keys: vec!["id".into()],
            event_time: "t".into(),
            reject_non_finite: reject,
            max_future_skew_ms: None,
            capacity: 16,
        };
        let registry = SchemaRegistry::new(PulsarAdmin::new(
            crate::tls::http_client(),
            "http://127.0.0.1:9",
        ));
        let decoded = PayloadDecoder::new(spec, registry)
            .unwrap()
            .decode(&messages)
            .await
            .unwrap();
        assert_eq!(decoded.row_messages, rows);
        let failures: Vec<usize> = decoded.failures.iter().map(|f| f.index).collect();
        assert_eq!(failures, failed);
        assert!(decoded
            .failures
            .iter()
            .all(|f| f.reason == DeadLetterReason::NonFiniteValue));
        if reject {
            assert!(
                decoded.failures[0].detail.contains("field x"),
                "{:?}",
                decoded.failures
            );
            assert!(
                decoded.failures[1].detail.contains("field y"),
                "{:?}",
                decoded.failures
            );
        }
    }
}

#[tokio::test]
async fn events_stamped_beyond_the_future_skew_are_dead_lettered() {
    let reader = ReaderSchema::parse(std::path::Path::new("t.avsc"), SCHEMA).unwrap();
    let spec = DecoderSpec {
        topic: "persistent://public/default/t".into(),
        reader: reader.clone(),
        format: PayloadFormat::Avro,
        compatibility: Compatibility::Backward,
        columns: vec!["id".into(), "n".into()],
        entity_keys: vec!["id".into()],
        event_time: "n".into(),
        reject_non_finite: false,
        max_future_skew_ms: Some(60_000),
        capacity: 16,
    };
    let registry = SchemaRegistry::new(PulsarAdmin::new(
        crate::tls::http_client(),
        "http://127.0.0.1:9",
    ));
    let published = 1_700_000_000_000_i64;
    // At the limit, one ms past it, in the past.
    let messages: Vec<SourceMessage> = [published + 60_000, published + 60_001, published - 5]
        .iter()
        .map(|&at| SourceMessage {
            publish_time_ms: published as u64,
            ..message(datum(&reader.avro, "e", at))
        })
        .collect();
    let decoded = PayloadDecoder::new(spec, registry)
        .unwrap()
        .decode(&messages)
        .await
        .unwrap();
    assert_eq!(decoded.row_messages, [0, 2]);
    assert_eq!(decoded.failures.len(), 1);
    assert_eq!(decoded.failures[0].index, 1);
    assert_eq!(
        decoded.failures[0].reason,
        DeadLetterReason::FutureEventTime
    );
    assert!(
        decoded.failures[0]
            .detail
            .contains("60001 ms after the publish time"),
        "{}",
        decoded.failures[0].detail
    );
}
