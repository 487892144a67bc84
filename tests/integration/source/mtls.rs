//! TLS client certificates against the listener `scripts/services.sh` starts for them (a
//! Pulsar proxy in front of the test broker that requires a certificate of the test CA, on
//! the binary protocol and the admin API alike): a good certificate streams end to end; no
//! certificate and a certificate of another CA are refused at start.

use std::time::Duration;

use crate::common::*;

/// Points the project at the listener that requires client certificates, with `auth`.
fn mtls_section(project: &Project, auth: &str) {
    project.pulsar_section(
        &env_path("FC_TEST_PULSAR_MTLS_URL"),
        &env_path("FC_TEST_PULSAR_MTLS_ADMIN_URL"),
        &format!("  tls_ca_file: {}\n{auth}", env_path("REDIS_TLS_CA")),
    );
}

fn tls_auth(cert: &str, key: &str) -> String {
    format!(
        "  auth:\n    type: tls\n    cert_file: {}\n    key_file: {}\n",
        env_path(cert),
        env_path(key)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_streams_end_to_end_through_a_listener_that_requires_one() {
    let project = Project::new(&redis_url());
    mtls_section(
        &project,
        &tls_auth("FC_TEST_PULSAR_CLIENT_CERT", "FC_TEST_PULSAR_CLIENT_KEY"),
    );
    let prefix = unique("mtls");
    project.pipeline(
        "mt",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    // `produce` registers the schema through the admin API: that listener requires the
    // certificate too, so the admin client presents it.
    project.produce("mt", 500, 50, BASE, 10);
    let connector = project.start();
    wait_drained(&project.topic, &["mt"], Duration::from_secs(90)).await;
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    assert_newest_values(&prefix, "mt", 500, 50).await;
    assert_eq!(unique_events(&local_offline_url(&project), "mt").await, 500);
    let key = std::fs::read_to_string(env_path("FC_TEST_PULSAR_CLIENT_KEY")).expect("key");
    let key_body = key.lines().nth(1).expect("a PEM line");
    assert!(
        !log.contains(key_body),
        "the private key was printed:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_untrusted_client_certificate_is_refused_at_start() {
    let project = Project::new(&redis_url());
    project.pipeline(
        "mx",
        "online:\n  key_prefix: mx",
        "offline:\n  enabled: false",
    );
    let refused = |auth: &str| {
        mtls_section(&project, auth);
        let output = project.run_command(&["run"]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        stderr
    };

    let stderr = refused("");
    assert!(
        stderr.contains("cannot connect to Pulsar")
            && stderr.contains("does the broker require a client certificate"),
        "{stderr}"
    );

    let stderr = refused(&tls_auth(
        "FC_TEST_PULSAR_UNTRUSTED_CERT",
        "FC_TEST_PULSAR_UNTRUSTED_KEY",
    ));
    assert!(
        stderr.contains("cannot connect to Pulsar")
            && stderr.contains("refused the client certificate")
            && stderr.contains("untrusted-client.crt"),
        "{stderr}"
    );
}
