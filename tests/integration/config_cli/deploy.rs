//! The deploy files stay correct although no Docker engine or cluster runs here: the compose
//! file against the Compose Specification schema (check-jsonschema's vendored copy), the
//! Kubernetes example and the Grafana dashboard against what the connector really serves.

use std::path::Path;
use std::process::Command;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The Feast venv's python with check-jsonschema added (pinned).
fn python_with_validator() -> String {
    let python = crate::online::feast_python();
    let has = Command::new(&python)
        .args(["-c", "import check_jsonschema"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        let status = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "check-jsonschema==0.39.0",
            ])
            .status()
            .expect("pip");
        assert!(status.success(), "pip install check-jsonschema");
    }
    python
}

fn check_compose(python: &str, file: &Path) -> std::process::Output {
    Command::new(python)
        .args([
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
        ])
        .arg(file)
        .output()
        .expect("check-jsonschema")
}

#[test]
fn compose_file_follows_the_compose_spec() {
    let python = python_with_validator();
    let output = check_compose(&python, &repo("docker-compose.yml"));
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // The validator does reject a broken file.
    let dir = tempfile::tempdir().expect("dir");
    let broken = dir.path().join("docker-compose.yml");
    std::fs::write(
        &broken,
        "services:\n  connector:\n    ports: 9464\n    depends_on: 7\n",
    )
    .expect("write");
    assert!(
        !check_compose(&python, &broken).status.success(),
        "a broken compose file must fail"
    );
}

#[test]
fn kubernetes_example_and_dashboard_match_what_the_connector_serves() {
    let python = crate::online::feast_python();
    let script = r#"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted(d["kind"] for d in docs)
deploy = next(d for d in docs if d["kind"] == "Deployment")
sidecar = next(c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "feature-connector")
dashboard = json.load(open(sys.argv[2]))
exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
env = {e["name"]: e.get("value") for e in sidecar["env"]}
compose = yaml.safe_load(open(sys.argv[3]))["services"]["connector"]
volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
auth_mounts = [m["mountPath"] for m in sidecar["volumeMounts"]
               if volumes[m["name"]].get("secret", {}).get("secretName") == "feature-connector-pulsar-auth"]
auth_secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "feature-connector-pulsar-auth")
print(json.dumps({"kinds": kinds, "args": sidecar["args"], "live": sidecar["livenessProbe"]["httpGet"]["path"],
                  "ready": sidecar["readinessProbe"]["httpGet"]["path"], "exprs": exprs,
                  "ports": [p["containerPort"] for p in sidecar["ports"]],
                  "binds": [env.get("FC_HTTP_BIND"), env.get("FC_SERVING_BIND")],
                  "compose_ports": compose.get("ports", []),
                  "compose_binds": [compose["environment"].get("FC_HTTP_BIND"),
                                    compose["environment"].get("FC_SERVING_BIND")],
                  "credentials": env.get("PULSAR_OAUTH2_CREDENTIALS_FILE"), "auth_mounts": auth_mounts,
                  "auth_keys": sorted(auth_secret["stringData"])}))
"#;
    let output = Command::new(python)
        .args(["-c", script])
        .arg(repo("deploy/kubernetes/sidecar.yaml"))
        .arg(repo("deploy/grafana-dashboard.json"))
        .arg(repo("docker-compose.yml"))
        .output()
        .expect("python");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let found: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(
        found["kinds"],
        serde_json::json!(["ConfigMap", "Deployment", "Secret", "Secret"])
    );
    // The OAuth2 credentials file the connector is pointed at is a key of the mounted Secret.
    assert_eq!(
        found["auth_mounts"],
        serde_json::json!(["/var/run/secrets/pulsar"])
    );
    assert_eq!(
        found["credentials"],
        serde_json::json!("/var/run/secrets/pulsar/credentials.json")
    );
    assert_eq!(
        found["auth_keys"],
        serde_json::json!(["credentials.json", "tls.crt", "tls.key"])
    );
    assert_eq!(found["args"], serde_json::json!(["run", "--root", "/app"]));
    assert_eq!(
        (found["live"].as_str(), found["ready"].as_str()),
        (Some("/healthz"), Some("/readyz"))
    );
    // Probes and metrics are exposed; feature reads stay on the pod's (container's) loopback.
    assert_eq!(found["ports"], serde_json::json!([9464]));
    assert_eq!(
        found["binds"],
        serde_json::json!(["0.0.0.0:9464", "127.0.0.1:6566"])
    );
    assert_eq!(found["compose_ports"], serde_json::json!(["9464:9464"]));
    assert_eq!(
        found["compose_binds"],
        serde_json::json!(["0.0.0.0:9464", "127.0.0.1:6566"])
    );
    assert!(feature_connector::serving::is_loopback_bind(
        found["binds"][1].as_str().unwrap_or_default()
    ));

    // Every metric the dashboard queries is one the connector exports.
    let metrics = feature_connector::metrics::Metrics::new();
    let labels = feature_connector::metrics::LaneLabels {
        pipeline: "p".into(),
        sink: "online".into(),
    };
    metrics.messages_received.get_or_create(&labels).inc();
    metrics.rows_written.get_or_create(&labels).inc();
    metrics.messages_acked.get_or_create(&labels).inc();
    metrics
        .sink_write_seconds
        .get_or_create(&labels)
        .observe(0.1);
    metrics
        .freshness_event_time_seconds
        .get_or_create(&labels)
        .observe(0.1);
    metrics
        .freshness_publish_time_seconds
        .get_or_create(&labels)
        .observe(0.1);
    metrics
        .dead_lettered
        .get_or_create(&feature_connector::metrics::DeadLetterLabels {
            pipeline: "p".into(),
            reason: "undecodable".into(),
        })
        .inc();
    fill_consistency_metrics(&metrics);
    let exported = metrics.encode();
    for expr in found["exprs"].as_array().expect("exprs") {
        let expr = expr.as_str().unwrap_or_default();
        for name in expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("feature_connector_"))
        {
            assert!(
                exported.contains(name),
                "dashboard queries {name}, which is not exported"
            );
        }
    }
}

/// One series of each consistency metric, as a connector that audits, serves and logs
/// features exports them.
fn fill_consistency_metrics(metrics: &feature_connector::metrics::Metrics) {
    use feature_connector::metrics::{
        AuditFeatureLabels, AuditOutcomeLabels, AuditRunLabels, FeatureLogLabels, PipelineLabels,
    };
    let consistency = &metrics.consistency;
    let pipeline = PipelineLabels {
        pipeline: "p".into(),
    };
    let feature = AuditFeatureLabels {
        pipeline: "p".into(),
        feature: "f".into(),
    };
    consistency
        .audit_entities
        .get_or_create(&AuditOutcomeLabels {
            pipeline: "p".into(),
            outcome: "equal",
        })
        .set(1);
    consistency
        .audit_defect_entities
        .get_or_create(&pipeline)
        .set(0);
    consistency
        .audit_feature_mismatch_ratio
        .get_or_create(&feature)
        .set(0.0);
    consistency
        .audit_feature_smape
        .get_or_create(&feature)
        .set(0.0);
    consistency
        .audit_table_lag_seconds
        .get_or_create(&pipeline)
        .set(0.0);
    consistency
        .audit_last_run_timestamp_seconds
        .get_or_create(&pipeline)
        .set(1.0);
    consistency
        .audit_duration_seconds
        .get_or_create(&pipeline)
        .set(1.0);
    consistency
        .audit_runs
        .get_or_create(&AuditRunLabels {
            pipeline: "p".into(),
            result: "clean",
        })
        .inc();
    consistency.online_acknowledged("p", 1_000);
    consistency
        .newest_event_age_seconds
        .get_or_create(&pipeline)
        .set(1.0);
    consistency.served("v", "PRESENT", 1);
    consistency
        .feature_log_rows
        .get_or_create(&FeatureLogLabels {
            view: "v".into(),
            outcome: "logged",
        })
        .inc();
}
