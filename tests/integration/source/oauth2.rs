//! OAuth2 client credentials against the real authorization server and broker
//! `scripts/services.sh` starts (ORY Hydra; the broker validates its tokens with
//! AuthenticationProviderOpenID, audience `pulsar`): a good credential streams into both
//! sinks, a token that expires during a run is renewed without loss or duplicates, and each
//! kind of refusal stops `run` at start with its own message.

use std::time::{Duration, Instant};

use crate::common::*;

/// `auth:` lines of type oauth2 with `credentials` and `audience`.
fn oauth2(credentials: &str, audience: &str, issuer: &str) -> String {
    format!(
        "  auth:\n    type: oauth2\n    issuer_url: {issuer}\n    audience: {audience}\n    credentials_file: {credentials}\n"
    )
}

fn issuer() -> String {
    env_path("FC_TEST_OAUTH2_ISSUER")
}

/// The client secrets of the test clients: never to be logged.
fn secrets() -> Vec<String> {
    [
        "FC_TEST_OAUTH2_CREDENTIALS",
        "FC_TEST_OAUTH2_WRONG_SECRET",
        "FC_TEST_OAUTH2_SHORT_CREDENTIALS",
    ]
    .iter()
    .map(|var| {
        let text = std::fs::read_to_string(env_path(var)).expect("credentials file");
        let json: serde_json::Value = serde_json::from_str(&text).expect("credentials JSON");
        json["client_secret"]
            .as_str()
            .expect("client_secret")
            .to_string()
    })
    .collect()
}

fn assert_no_secret(text: &str) {
    for secret in secrets() {
        assert!(
            !text.contains(&secret),
            "a client secret was printed:\n{text}"
        );
    }
    // An access token is a JWT: its header is the same base64 for every token of the issuer.
    assert!(
        !text.contains("eyJhbGciOiJSUzI1NiIs"),
        "an access token was printed:\n{text}"
    );
}

/// Events `0..count` in `rounds` rounds, `pause` apart (each round continues the series).
async fn produce_in_rounds(
    project: &Project,
    pipeline: &str,
    count: u64,
    rounds: u64,
    pause: Duration,
) {
    for round in 0..rounds {
        let per_round = count / rounds;
        let (n, start, base) = (
            per_round.to_string(),
            (round * per_round).to_string(),
            BASE.to_string(),
        );
        project.produce_with(
            pipeline,
            &[
                "--count",
                &n,
                "--entities",
                "100",
                "--start",
                &start,
                "--base-ms",
                &base,
                "--batch",
                "10",
            ],
        );
        tokio::time::sleep(pause).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_stream_into_both_sinks_without_secrets_or_first_attempt_warnings() {
    let project = Project::new(&redis_url());
    let credentials = env_path("FC_TEST_OAUTH2_CREDENTIALS");
    let audience = env_path("FC_TEST_OAUTH2_AUDIENCE");
    project.pulsar_section(
        &pulsar_url(),
        &pulsar_admin(),
        &oauth2(&credentials, &audience, &issuer()),
    );
    let prefix = unique("oauth2");
    project.pipeline(
        "oa",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    project.produce("oa", 1_000, 100, BASE, 10);
    let connector = project.start();
    wait_drained(&project.topic, &["oa"], Duration::from_secs(90)).await;
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    assert_newest_values(&prefix, "oa", 1_000, 100).await;
    assert_eq!(
        unique_events(&local_offline_url(&project), "oa").await,
        1_000
    );
    assert!(log.contains("OAuth2 access token obtained"), "{log}");
    // pulsar-rs's first attempt to subscribe is not a warning: logged as one, it was noise at
    // every start-up.
    assert!(
        !log.contains("Retry #0"),
        "first attempts are logged as warnings:\n{log}"
    );
    assert_no_secret(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_expiring_during_a_run_is_renewed_without_loss_or_duplicates() {
    let project = Project::new(&redis_url());
    let credentials = env_path("FC_TEST_OAUTH2_SHORT_CREDENTIALS");
    let ttl: u64 = env_path("FC_TEST_OAUTH2_SHORT_TTL")
        .parse()
        .expect("seconds");
    let audience = env_path("FC_TEST_OAUTH2_AUDIENCE");
    project.pulsar_section(
        &pulsar_url(),
        &pulsar_admin(),
        &oauth2(&credentials, &audience, &issuer()),
    );
    let prefix = unique("refresh");
    project.pipeline(
        "rf",
        &format!("online:\n  key_prefix: {prefix}"),
        "offline:\n  url: file://offline\n  rollover_interval: 1s",
    );
    let mut connector = project.start();
    // Four rounds over about three token lifetimes: the broker finds the connection's token
    // expired (it checks every 2 s) and asks for a new one while events keep coming.
    let started = Instant::now();
    produce_in_rounds(&project, "rf", 1_000, 4, Duration::from_secs(ttl)).await;
    assert!(started.elapsed() > Duration::from_secs(2 * ttl));
    wait_drained(&project.topic, &["rf"], Duration::from_secs(90)).await;
    connector.assert_running();
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0, "{log}");
    assert_newest_values(&prefix, "rf", 1_000, 100).await;
    // Every event exactly once in the table (`unique_events` fails on a duplicate row).
    assert_eq!(
        unique_events(&local_offline_url(&project), "rf").await,
        1_000
    );
    let tokens = log.matches("OAuth2 access token obtained").count();
    assert!(
        tokens >= 3,
        "expected renewals over the run, saw {tokens} tokens:\n{log}"
    );
    // Renewed on the open connection (the broker's challenge), not by losing it: a dropped
    // connection fails the consumer's stream, which the source reports and rebuilds.
    assert!(!log.contains("rebuilding"), "a consumer was lost:\n{log}");
    assert_no_secret(&log);
}

/// Runs `run` on `project` and returns its stderr, asserting exit 1 within a minute.
fn refused(project: &Project) -> String {
    let started = Instant::now();
    let output = project
        .command_with_env(&["run"], &[("RUST_LOG", "debug")])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "gave up after {:?}",
        started.elapsed()
    );
    assert_no_secret(&stderr);
    stderr
}

/// The last line, where `run` prints why it stopped.
fn last_error(stderr: &str) -> &str {
    stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("error:"))
        .unwrap_or(stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_stop_run_at_start_each_with_its_own_message() {
    let project = Project::new(&redis_url());
    project.pipeline(
        "no",
        "online:\n  key_prefix: no",
        "offline:\n  enabled: false",
    );
    let (good, wrong) = (
        env_path("FC_TEST_OAUTH2_CREDENTIALS"),
        env_path("FC_TEST_OAUTH2_WRONG_SECRET"),
    );
    let audience = env_path("FC_TEST_OAUTH2_AUDIENCE");
    let case = |extra: &str| {
        project.pulsar_section(&pulsar_url(), &pulsar_admin(), extra);
        refused(&project)
    };

    let stderr = case(&oauth2(&wrong, &audience, &issuer()));
    assert!(
        last_error(&stderr).contains("refused the client credentials (invalid_client"),
        "{stderr}"
    );

    // An audience the issuer does not grant this client.
    let stderr = case(&oauth2(&good, "no-such-audience", &issuer()));
    assert!(
        last_error(&stderr).contains("refused audience `no-such-audience`"),
        "{stderr}"
    );

    // An audience the issuer grants but the broker does not accept.
    let stderr = case(&oauth2(&good, "other-service", &issuer()));
    let message = last_error(&stderr);
    assert!(
        message.contains("the broker refused the OAuth2 access token")
            && message.contains("other-service"),
        "{stderr}"
    );

    let nobody = format!("http://127.0.0.1:{}", free_port());
    let stderr = case(&oauth2(&good, &audience, &nobody));
    assert!(
        last_error(&stderr).contains(&format!("cannot reach the OAuth2 issuer at {nobody}")),
        "{stderr}"
    );

    // A token of the issuer used after it expired (e.g. from a file nobody renews).
    let expired = project.path().join("expired.jwt");
    std::fs::write(&expired, short_lived_token().await).expect("write token");
    let ttl: u64 = env_path("FC_TEST_OAUTH2_SHORT_TTL")
        .parse()
        .expect("seconds");
    tokio::time::sleep(Duration::from_secs(ttl + 2)).await;
    let stderr = case(&format!(
        "  auth:\n    type: token\n    token_file: {}\n",
        expired.display()
    ));
    let message = last_error(&stderr);
    assert!(
        message.contains("the broker refused the token: it expired at"),
        "{stderr}"
    );
}

/// An access token of the short-lived test client, asked for as any client would.
async fn short_lived_token() -> String {
    let credentials: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(env_path("FC_TEST_OAUTH2_SHORT_CREDENTIALS")).expect("read"),
    )
    .expect("credentials JSON");
    let form = [
        ("grant_type", "client_credentials"),
        (
            "client_id",
            credentials["client_id"].as_str().expect("client_id"),
        ),
        (
            "client_secret",
            credentials["client_secret"]
                .as_str()
                .expect("client_secret"),
        ),
        ("audience", "pulsar"),
    ];
    let answer: serde_json::Value = feature_connector::tls::http_client()
        .post(format!("{}/oauth2/token", issuer()))
        .form(&form)
        .send()
        .await
        .expect("token endpoint")
        .json()
        .await
        .expect("token JSON");
    answer["access_token"]
        .as_str()
        .expect("access_token")
        .to_string()
}
