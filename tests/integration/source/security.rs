//! Pulsar security against the real broker (token authentication on, TLS listeners):
//! a token from a file and TLS with a private CA work end to end; a wrong token and an
//! unknown CA fail at start with a clear message; no secret is ever logged, even at debug.

use std::time::Duration;

use crate::common::*;

fn secrets() -> Vec<String> {
    let token = std::fs::read_to_string(env_path("FC_TEST_PULSAR_TOKEN_FILE")).expect("token");
    let bad = std::fs::read_to_string(env_path("FC_TEST_PULSAR_BAD_TOKEN_FILE")).expect("token");
    // The signature part of a JWT is what must never leak; the whole token neither.
    let signature = |t: &str| t.trim().rsplit('.').next().unwrap_or_default().to_string();
    vec![
        token.trim().to_string(),
        signature(&token),
        bad.trim().to_string(),
        signature(&bad),
        "testing-secret-key".into(),
    ]
}

fn assert_no_secret(text: &str) {
    for secret in secrets() {
        assert!(!text.contains(&secret), "a secret was printed:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_from_a_file_over_tls_works_end_to_end_and_nothing_secret_is_logged() {
    let project = Project::new(&redis_url());
    let ca = env_path("REDIS_TLS_CA");
    project.pulsar_section(
        &env_path("FC_TEST_PULSAR_TLS_URL"),
        &env_path("FC_TEST_PULSAR_TLS_ADMIN_URL"),
        &format!(
            "  token_file: {}\n  tls_ca_file: {ca}\n",
            env_path("FC_TEST_PULSAR_TOKEN_FILE")
        ),
    );
    let prefix = unique("sec");
    project.pipeline(
        "sec",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    project.produce("sec", 1_000, 100, BASE, 10);
    // Debug everywhere, the Pulsar client included, with an S3 secret in the environment.
    let connector = project.start_with_env(
        "run.log",
        &[
            ("RUST_LOG", "debug"),
            ("AWS_SECRET_ACCESS_KEY", "testing-secret-key"),
        ],
    );
    wait_drained(&project.topic, &["sec"], Duration::from_secs(60)).await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
    assert_newest_values(&prefix, "sec", 1_000, 100).await;
    assert!(log.contains("pulsar+ssl://"), "the TLS URL is used:\n{log}");
    assert_no_secret(&log);
    assert_no_secret(
        &std::fs::read_to_string(project.path().join("config.yaml")).unwrap_or_default(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_or_an_unknown_ca_fails_at_start_clearly() {
    let project = Project::new(&redis_url());
    project.pipeline(
        "bad",
        "online:\n  key_prefix: bad",
        "offline:\n  enabled: false",
    );
    project.pulsar_section(
        &pulsar_url(),
        &pulsar_admin(),
        &format!(
            "  token_file: {}\n",
            env_path("FC_TEST_PULSAR_BAD_TOKEN_FILE")
        ),
    );
    let started = std::time::Instant::now();
    let output = project
        .command_with_env(&["run"], &[("RUST_LOG", "debug")])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot connect to Pulsar") && stderr.contains("check the token"),
        "the error names the refused authentication:\n{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "gave up after {:?}",
        started.elapsed()
    );
    assert_no_secret(&stderr);

    // TLS without the private CA: the system roots do not know the broker's certificate.
    project.pulsar_section(
        &env_path("FC_TEST_PULSAR_TLS_URL"),
        &env_path("FC_TEST_PULSAR_TLS_ADMIN_URL"),
        "",
    );
    let output = project.run_command(&["run"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot connect to Pulsar") && stderr.contains("pulsar.tls_ca_file"),
        "{stderr}"
    );
}
