//! `validate` names the file, the line and the key of every problem, and exits 2.

use crate::common::*;

const GOOD: &str = "name: p
source:
  topic: persistent://public/default/t
  subscription: p
schema:
  file: schemas/user_profile.avsc
entity:
  keys: [user_id]
  event_time: event_time
online:
  key_prefix: fc
offline:
  url: file://offline
";

/// Replaces `from` with `to` in the good pipeline, validates, and checks the message.
fn assert_problem(from: &str, to: &str, line: u32, key: &str, words: &str) {
    let project = Project::new(&redis_url());
    assert!(GOOD.contains(from), "fixture lacks {from:?}");
    std::fs::write(
        project.path().join("connectors/p.yaml"),
        GOOD.replacen(from, to, 1),
    )
    .expect("write");
    let output = project.validate();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "exit code for {to:?}; stderr:\n{stderr}"
    );
    let location = format!("p.yaml:{line}: key `{key}`");
    assert!(
        stderr.contains(&location),
        "expected {location:?} in:\n{stderr}"
    );
    assert!(stderr.contains(words), "expected {words:?} in:\n{stderr}");
}

#[test]
fn the_good_pipeline_is_valid() {
    let project = Project::new(&redis_url());
    std::fs::write(project.path().join("connectors/p.yaml"), GOOD).expect("write");
    let output = project.validate();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("1 pipeline(s) valid"), "{stdout}");
    // The default delivery: one subscription named as configured feeds both sinks; Failover
    // because the offline sink acknowledges cumulatively.
    assert!(
        stdout.contains(
            "\n  subscription `p` (Failover, Cumulative acknowledgement) feeds online + offline\n"
        ),
        "{stdout}"
    );
    assert_eq!(stdout.matches("  subscription `").count(), 1, "{stdout}");
    assert!(
        stdout.contains("\n  delivery shared: each event is delivered and decoded once for all sinks; a message is acknowledged when every sink has it durable, so while one sink's service is down the others pause too"),
        "{stdout}"
    );
}

/// Validates `yaml` as the only pipeline, asserts it is valid and returns the output.
fn valid_stdout(yaml: &str) -> String {
    let project = Project::new(&redis_url());
    std::fs::write(project.path().join("connectors/p.yaml"), yaml).expect("write");
    let output = project.validate();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("1 pipeline(s) valid"), "{stdout}");
    stdout
}

#[test]
fn validate_prints_the_subscriptions_of_per_sink_delivery() {
    let stdout = valid_stdout(&GOOD.replacen(
        "  subscription: p\n",
        "  subscription: p\n  delivery: per_sink\n",
        1,
    ));
    for line in [
        // subscription_type (default Key_Shared) for the online sink, Failover for the
        // cumulatively acknowledging offline sink.
        "\n  subscription `p-online` (Key_Shared, Individual acknowledgement) feeds online\n",
        "\n  subscription `p-offline` (Failover, Cumulative acknowledgement) feeds offline\n",
        "\n  delivery per_sink: each sink has its own subscription, acknowledges at its own pace and keeps going while another sink's service is down",
    ] {
        assert!(stdout.contains(line), "expected {line:?} in:\n{stdout}");
    }
    assert_eq!(stdout.matches("  subscription `").count(), 2, "{stdout}");
    assert!(!stdout.contains("delivery shared"), "{stdout}");
}

#[test]
fn validate_prints_the_subscription_of_an_online_only_pipeline() {
    let stdout = valid_stdout(
        &GOOD
            .replacen(
                "  subscription: p\n",
                "  subscription: p\n  subscription_type: Shared\n",
                1,
            )
            .replacen("offline:\n  url: file://offline\n", "", 1),
    );
    // Only the online sink: the configured type, no trade-off to explain.
    assert!(
        stdout.contains("\n  subscription `p` (Shared, Individual acknowledgement) feeds online\n"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("  subscription `").count(), 1, "{stdout}");
    assert!(!stdout.contains("  delivery "), "{stdout}");
}

#[test]
fn unknown_delivery() {
    assert_problem(
        "  subscription: p\n",
        "  subscription: p\n  delivery: both\n",
        5,
        "delivery",
        "`both` is not one of the accepted values (accepted: shared, per_sink)",
    );
}

#[test]
fn unknown_key() {
    assert_problem(
        "  key_prefix: fc\n",
        "  key_prefix: fc\n  tll: 5m\n",
        12,
        "tll",
        "unknown key `tll`; did you mean `ttl`?",
    );
}

#[test]
fn wrong_type() {
    assert_problem(
        "  url: file://offline\n",
        "  url: file://offline\n  rollover_rows: lots\n",
        14,
        "rollover_rows",
        "`lots` is not a whole number, 0 or more",
    );
}

#[test]
fn every_problem_of_a_file_is_named_in_one_run() {
    let project = Project::new(&redis_url());
    let broken = GOOD
        .replacen("  subscription: p\n", "  subscripton: p\n", 1)
        .replacen("keys: [user_id]", "keys: [user_idd]", 1)
        .replacen("  key_prefix: fc\n", "  key_prefix: fc\n  ttl: a week\n", 1)
        .replacen(
            "  url: file://offline\n",
            "  url: file://offline\n  rollover_rows: -5\n",
            1,
        );
    std::fs::write(project.path().join("connectors/p.yaml"), broken).expect("write");
    let output = project.validate();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for expected in [
        "p.yaml:4: key `subscripton`: unknown key `subscripton`; did you mean `subscription`?",
        "p.yaml:12: key `ttl`: `a week` is not a duration: a number and a unit, e.g. 500ms, 30s, 5m, 2h, 7d or 1h 30m",
        "p.yaml:15: key `rollover_rows`: `-5` is not a whole number, 0 or more",
        "p.yaml:8: key `entity.keys`",
    ] {
        assert!(stderr.contains(expected), "expected {expected:?} in:\n{stderr}");
    }
    assert!(stderr.contains("user_idd"), "{stderr}");
    for rust in ["Option<", "usize", "u64", "deserialize", "serde"] {
        assert!(!stderr.contains(rust), "{rust:?} in:\n{stderr}");
    }
}

#[test]
fn empty_listener_variables_turn_the_embedded_listeners_off() {
    let project = Project::new(&redis_url());
    std::fs::write(project.path().join("connectors/p.yaml"), GOOD).expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_feature-connector"))
        .args(["validate", "--root"])
        .arg(project.path())
        .env("FC_SERVING_BIND", "")
        .env("FC_HTTP_BIND", "")
        .output()
        .expect("run validate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("Option<"), "{stderr}");
}

#[test]
fn missing_schema_file() {
    assert_problem(
        "schemas/user_profile.avsc",
        "schemas/nope.avsc",
        6,
        "schema.file",
        "cannot read schema file",
    );
}

#[test]
fn bad_store_url() {
    assert_problem(
        "file://offline",
        "ftp://somewhere/x",
        13,
        "offline.url",
        "unsupported scheme",
    );
}

#[test]
fn bad_topic() {
    assert_problem(
        "persistent://public/default/t",
        "just-a-name",
        3,
        "source.topic",
        "not a full topic name",
    );
}

#[test]
fn key_field_not_in_schema() {
    assert_problem(
        "keys: [user_id]",
        "keys: [customer_id]",
        8,
        "entity.keys",
        "`customer_id` is not in the schema",
    );
}

#[test]
fn unset_environment_variable() {
    assert_problem(
        "key_prefix: fc",
        "key_prefix: ${FC_IT_SURELY_UNSET}",
        11,
        "key_prefix",
        "FC_IT_SURELY_UNSET",
    );
}

#[test]
fn duplicate_pipeline_names() {
    let project = Project::new(&redis_url());
    std::fs::write(project.path().join("connectors/a.yaml"), GOOD).expect("write");
    std::fs::write(project.path().join("connectors/b.yaml"), GOOD).expect("write");
    let output = project.validate();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("b.yaml:1: key `name`: pipeline name `p` is already used by"),
        "{stderr}"
    );
}

#[test]
fn broken_service_file() {
    let project = Project::new(&redis_url());
    std::fs::write(project.path().join("connectors/p.yaml"), GOOD).expect("write");
    let config = std::fs::read_to_string(project.path().join("config.yaml")).expect("read");
    std::fs::write(
        project.path().join("config.yaml"),
        config.replace("redis:\n", "redis:\n  pool: 3\n"),
    )
    .expect("write");
    let output = project.validate();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("config.yaml:5: key `pool`"), "{stderr}");
}

#[test]
fn schema_file_outside_the_project() {
    let outside = std::env::temp_dir().join(format!("{}.avsc", unique("outside")));
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/user_profile.avsc"),
        &outside,
    )
    .expect("copy schema");
    let escaping = "../".repeat(12) + outside.to_str().expect("path").trim_start_matches('/');
    for written in [outside.to_str().expect("path").to_string(), escaping] {
        assert_problem(
            "schemas/user_profile.avsc",
            &written,
            6,
            "schema.file",
            "is outside the project root",
        );
    }
    std::fs::remove_file(outside).ok();
}

#[test]
fn two_pipelines_writing_the_same_redis_keys() {
    let project = Project::new(&redis_url());
    std::fs::write(
        project.path().join("connectors/a.yaml"),
        GOOD.replace("name: p", "name: b")
            .replace("key_prefix: fc", "key_prefix: \"fc:a\""),
    )
    .expect("write");
    std::fs::write(
        project.path().join("connectors/b.yaml"),
        GOOD.replace("name: p", "name: a"),
    )
    .expect("write");
    let output = project.validate();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("key `online.key_prefix`") && stderr.contains("overlap `fc:a:b:…`"),
        "{stderr}"
    );
    // `run` refuses the same way before connecting to anything.
    let run = project.run_command(&["run"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("overlap"));
}

#[test]
fn a_field_named_like_an_offline_table_column() {
    let project = Project::new(&redis_url());
    let schema = include_str!("../../../schemas/user_profile.avsc").replacen(
        r#"{"name": "sessions_7d", "type": "int"}"#,
        r#"{"name": "dt", "type": "int"}"#,
        1,
    );
    project.schema_file("user_profile.avsc", &schema);
    std::fs::write(project.path().join("connectors/p.yaml"), GOOD).expect("write");
    let output = project.validate();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("key `offline`"), "{stderr}");
    assert!(
        stderr.contains("field `dt` clashes with a column the offline table adds"),
        "{stderr}"
    );
}

/// `pulsar.replication`: a misspelt key, an unknown mode and a cluster name that cannot be
/// one are each named with their line (or key), exit 2.
#[test]
fn replication_section_problems() {
    for (lines, location, words) in [
        (
            "  replication:\n    cluster: eu\n    offlin: own_region\n",
            "config.yaml:6: key `offlin`",
            "did you mean `offline`",
        ),
        (
            "  replication:\n    cluster: eu\n    offline: everywhere\n",
            "config.yaml:6: key `offline`",
            "own_region",
        ),
        (
            "  replication:\n    cluster: eu/west\n",
            "key `pulsar.replication.cluster`",
            "not a cluster name",
        ),
        (
            "  replication:\n    cluster: eu\n    replicated_subscriptions: true\n",
            "key `pulsar.replication.replicated_subscriptions`",
            "replicated subscriptions are for active/standby",
        ),
    ] {
        let project = Project::new(&redis_url());
        std::fs::write(project.path().join("connectors/p.yaml"), GOOD).expect("write");
        project.pulsar_section(&pulsar_url(), &pulsar_admin(), lines);
        let output = project.validate();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{lines}: {stderr}");
        assert!(
            stderr.contains(location),
            "{lines}: expected {location:?} in:\n{stderr}"
        );
        assert!(
            stderr.contains(words),
            "{lines}: expected {words:?} in:\n{stderr}"
        );
    }
}
