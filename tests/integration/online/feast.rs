//! Rows written in the `feast` layout are read back by Feast's own SDK
//! (`FeatureStore.get_online_features`, PyPI feast installed by scripts/feast_env.sh).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use crate::common::*;

const BASE: i64 = 1_789_000_000_000;
const EVENTS: u64 = 200;
const ENTITIES: u64 = 20;

/// The python of the venv scripts/feast_env.sh makes (Feast, pyarrow).
pub fn feast_python() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("bash")
        .arg(root.join("scripts/feast_env.sh"))
        .output()
        .expect("run scripts/feast_env.sh");
    assert!(
        output.status.success(),
        "feast_env.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .expect("python path")
        .trim()
        .to_string()
}

/// Runs tests/feast/read_online.py (Feast's SDK) with `target` (`--redis H:P` or
/// `--remote URL …`) and `env` on the views and reads of `spec`, in a Feast repo made under
/// `repo`.
pub fn read_with_feast(
    python: &str,
    repo: &Path,
    (project, spec): (&str, &Value),
    target: &[&str],
    env: &[(&str, &str)],
) -> Value {
    std::fs::create_dir_all(repo).expect("repo dir");
    let spec_path = repo.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).expect("spec");
    let output = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/feast/read_online.py"))
        .arg("--repo-dir")
        .arg(repo.join("repo"))
        .args(target)
        .args(["--project", project, "--spec"])
        .arg(&spec_path)
        .envs(env.iter().copied())
        .output()
        .expect("run read_online.py");
    assert!(
        output.status.success(),
        "read_online.py {target:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("json from read_online.py")
}

fn pair_schema() -> &'static str {
    r#"{"type":"record","name":"UserRegion","fields":[
        {"name":"user_id","type":"string"},
        {"name":"region","type":"string"},
        {"name":"event_time","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"visits","type":"long"},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"scores","type":{"type":"array","items":"double"}},
        {"name":"counts","type":{"type":"array","items":"long"}},
        {"name":"last_seen","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feast_sdk_reads_what_the_connector_wrote() {
    let python = feast_python();
    let project_name = unique("fcit").replace('-', "_");
    let mut single = Project::new(&redis_url());
    single.topic = format!("{}-single", single.topic);
    single.pipeline(
        "user_features",
        &format!("online:\n  layout: feast\n  feast_project: {project_name}"),
        "offline:\n  enabled: false",
    );
    let pair = Project::new(&redis_url());
    pair.schema_file("pair.avsc", pair_schema());
    std::fs::write(
        pair.path().join("connectors/pair.yaml"),
        format!(
            "name: user_region\nsource:\n  topic: {}\n  subscription: pair\nschema:\n  file: schemas/pair.avsc\nentity:\n  keys: [user_id, region]\n  event_time: event_time\nonline:\n  layout: feast\n  feast_project: {project_name}\n",
            pair.topic
        ),
    )
    .expect("pipeline");

    for (project, name, sub) in [
        (&single, "user_features", "user_features"),
        (&pair, "user_region", "pair"),
    ] {
        project.produce_with(
            name,
            &[
                "--count",
                &EVENTS.to_string(),
                "--entities",
                &ENTITIES.to_string(),
                "--base-ms",
                &BASE.to_string(),
                "--shuffle",
            ],
        );
        let connector = project.start();
        let topic = project.topic.clone();
        wait_drained(&topic, &[sub], Duration::from_secs(60)).await;
        assert_eq!(connector.stop(), 0);
    }

    let entities: Vec<u64> = (0..ENTITIES).collect();
    let spec = json!({
        "views": [
            {"name": "user_features", "ttl_seconds": 0,
             "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
             "features": [
                {"name": "purchases_30d", "dtype": "Int64"}, {"name": "sessions_7d", "dtype": "Int32"},
                {"name": "avg_basket_eur", "dtype": "Float64"}, {"name": "ctr_7d", "dtype": "Float32"},
                {"name": "is_premium", "dtype": "Bool"}, {"name": "favourite_category", "dtype": "String"},
                {"name": "embedding_id", "dtype": "Bytes"}, {"name": "last_review_score", "dtype": "Float64"}]},
            {"name": "user_region", "ttl_seconds": 0,
             "entities": [{"name": "user2", "join_key": "user_id", "dtype": "String"},
                          {"name": "region", "join_key": "region", "dtype": "String"}],
             "features": [
                {"name": "visits", "dtype": "Int64"}, {"name": "tags", "dtype": "Array(String)"},
                {"name": "scores", "dtype": "Array(Float64)"}, {"name": "counts", "dtype": "Array(Int64)"},
                {"name": "last_seen", "dtype": "UnixTimestamp"}]}
        ],
        "read": [
            {"view": "user_features", "entity_rows": entities.iter().map(|e| json!({"user_id": format!("user-{e}")})).collect::<Vec<_>>()},
            {"view": "user_region", "entity_rows": entities.iter().map(|e| json!({"user_id": format!("user-{e}"), "region": format!("region-{e}")})).collect::<Vec<_>>()}
        ]
    });
    let repo = tempfile::tempdir().expect("repo dir");
    let redis_host = redis_url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string();
    let read = read_with_feast(
        &python,
        repo.path(),
        (&project_name, &spec),
        &["--redis", &redis_host],
        &[],
    );

    let users = &read["reads"][0];
    let pairs = &read["reads"][1];
    for (row, entity) in entities.iter().enumerate() {
        let i = EVENTS - ENTITIES + entity;
        let f = i as f64;
        let expected = json!({
            "purchases_30d": i * 3, "sessions_7d": i % 1000 + 3, "avg_basket_eur": f / 4.0 + 4.0,
            "ctr_7d": f64::from(i as f32 / 4.0 + 5.0), "is_premium": i.is_multiple_of(2),
            "favourite_category": format!("favourite_category-{i}"),
            "embedding_id": base64::engine::general_purpose::STANDARD.encode(i.to_le_bytes()),
            "last_review_score": if i % 10 == 9 { Value::Null } else { json!(f / 4.0 + 9.0) },
        });
        assert_eq!(users["rows"][row], expected, "user-{entity}");
        assert_eq!(users["kinds"][row]["sessions_7d"], json!("int32_val"));
        assert_eq!(users["kinds"][row]["ctr_7d"], json!("float_val"));
        assert_eq!(
            users["event_time_us"][row],
            json!((BASE + i as i64) * 1000),
            "event time of user-{entity}"
        );
        let expected_pair = json!({
            "visits": i * 4,
            "tags": (0..3).map(|k| format!("tags-{}", i + k)).collect::<Vec<_>>(),
            "scores": (0..3).map(|k| (i + k) as f64 / 4.0 + 5.0).collect::<Vec<_>>(),
            "counts": (0..3).map(|k| (i + k) * 7).collect::<Vec<_>>(),
            "last_seen": 1_700_000_000 + i,
        });
        assert_eq!(
            pairs["rows"][row], expected_pair,
            "user-{entity}/region-{entity}"
        );
    }

    // Our own reader decodes the same bytes.
    let output = single.run_command(&[
        "get",
        "--pipeline",
        "user_features",
        "--entity",
        "user_id=user-3",
        "--features",
        "purchases_30d,ctr_7d",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let got: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(
        got["features"],
        json!({"purchases_30d": 183 * 3, "ctr_7d": 183.0 / 4.0 + 5.0})
    );
    assert_eq!(got["event_time_ms"], json!(BASE + 183));
}
