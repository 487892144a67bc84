//! The listener split and its guard, against the real binary: feature reads only on
//! `serving.bind`, probes and metrics only on `http.bind`; a serving bind reachable from the
//! network makes `run` refuse to start without a token (exit 2, like other config errors)
//! and `validate` warn; with a token (here from a mounted file) reads need it, probes do not.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

/// A project with one native online pipeline holding entities `user-0..user-4`.
async fn serving_project(serving_lines: &str) -> Project {
    let project = Project::new(&redis_url());
    project.pipeline(
        "guarded",
        &format!("online:\n  key_prefix: {}", unique("guard")),
        "offline:\n  enabled: false",
    );
    if !serving_lines.is_empty() {
        project.serving_extra(serving_lines);
    }
    project.produce("guarded", 20, 5, BASE, 0);
    project
}

async fn wait_ready(project: &Project) {
    wait_until(
        "the connector to be ready",
        Duration::from_secs(60),
        || async {
            project
                .http_get("/readyz")
                .await
                .is_some_and(|(s, _)| s == 200)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_served_on_their_own_listener_and_probes_on_theirs() {
    let project = serving_project("").await;
    let connector = project.start();
    wait_ready(&project).await;
    wait_drained(&project.topic, &["guarded"], Duration::from_secs(60)).await;

    let (status, body) = project
        .serving_get("/v1/features/guarded?user_id=user-1&features=purchases_30d")
        .await
        .expect("serving listener");
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(body["features"]["purchases_30d"], json!(16 * 3));

    // The probes listener has no feature routes, and the serving listener no probes.
    let (status, _) = project
        .http_get("/v1/features/guarded?user_id=user-1")
        .await
        .expect("probes listener");
    assert_eq!(status, 404);
    let feast = feature_connector::tls::http_client()
        .post(format!(
            "http://127.0.0.1:{}/get-online-features",
            project.http_port
        ))
        .json(&json!({"features": ["guarded:purchases_30d"], "entities": {"user_id": ["user-1"]}}))
        .send()
        .await
        .expect("post");
    assert_eq!(feast.status().as_u16(), 404);
    for probe in ["/healthz", "/metrics"] {
        let (status, _) = project.http_get(probe).await.expect("probe");
        assert_eq!(status, 200, "{probe}");
        let (status, body) = project.serving_get(probe).await.expect("serving");
        assert_eq!(status, 404, "{probe} must not be on the serving listener");
        let body: Value = serde_json::from_str(&body).expect("JSON error");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("no such endpoint")),
            "{body}"
        );
    }
    assert_eq!(connector.stop(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_serving_bind_needs_a_token() {
    let port = free_port();
    // Reads on a runtime of two threads here (`serving.threads`), on one in the other tests.
    let project = serving_project("  threads: 2").await;
    let open_bind = [("FC_SERVING_BIND", format!("0.0.0.0:{port}"))];
    let env: Vec<(&str, &str)> = open_bind.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // No token: `validate` warns (exit 0), `run` refuses to start (exit 2).
    let output = project
        .command_with_env(&["validate"], &env)
        .output()
        .expect("validate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning:")
            && stderr.contains("key `serving.bind`")
            && stderr.contains("not a loopback address"),
        "{stderr}"
    );
    let output = project
        .command_with_env(&["run"], &env)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("key `serving.token`") && stderr.contains(&format!("0.0.0.0:{port}")),
        "{stderr}"
    );

    // A token from a file (a mounted Secret): reads need it, probes do not.
    let secret = project.path().join("serving-token");
    std::fs::write(&secret, "file-token-0123456789\n").expect("token file");
    let token_file = project.path().join("config.yaml");
    let config = std::fs::read_to_string(&token_file).expect("config");
    std::fs::write(
        &token_file,
        config.replacen(
            "serving:\n",
            &format!("serving:\n  token_file: {}\n", secret.display()),
            1,
        ),
    )
    .expect("config");
    let output = project
        .command_with_env(&["validate"], &env)
        .output()
        .expect("validate");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("warning:"));
    let connector = project.start_with_env(
        "run.log",
        &[("FC_SERVING_BIND", &format!("0.0.0.0:{port}"))],
    );
    wait_ready(&project).await;
    wait_drained(&project.topic, &["guarded"], Duration::from_secs(60)).await;
    let url = format!("http://127.0.0.1:{port}/get-online-features");
    let body = json!({"features": ["guarded:purchases_30d"], "entities": {"user_id": ["user-2"]}});
    let http = feature_connector::tls::http_client();
    for token in [None, Some("wrong-token"), Some("file-token-012345678")] {
        let mut request = http.post(&url).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("post");
        assert_eq!(response.status().as_u16(), 401, "token {token:?}");
        assert_eq!(
            response
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
        let error: Value = response.json().await.expect("JSON error");
        assert!(error_message(&error).contains("bearer token"), "{error}");
        // Feast's endpoint answers in Feast's shape: its client raises this class.
        let detail: Value =
            serde_json::from_str(error.as_str().expect("Feast's error detail")).expect("detail");
        assert_eq!(detail["class"], "FeastPermissionError", "{detail}");
    }
    let response = http
        .post(&url)
        .bearer_auth("file-token-0123456789")
        .json(&body)
        .send()
        .await
        .expect("post");
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["results"][1]["values"], json!([17 * 3]));
    let (status, _) = project.http_get("/metrics").await.expect("metrics");
    assert_eq!(status, 200, "probes need no token");
    let (code, log) = connector.stop_with_log();
    assert_eq!(code, 0);
    assert!(
        !log.contains("file-token-0123456789"),
        "the token is never logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_settings_are_checked_like_other_config() {
    let cases = [
        (
            "  max_entities_per_request: 0",
            "serving.max_entities_per_request",
            "at least 1",
        ),
        ("  threads: 0", "serving.threads", "at least 1"),
        (
            "  request_timeout: 0s",
            "serving.request_timeout",
            "must be positive",
        ),
        (
            "  feature_services:\n    ranking: [\"guarded:nope\", ghost]",
            "serving.feature_services.ranking",
            "view `guarded` has no feature `nope`",
        ),
    ];
    for (lines, key, words) in cases {
        let project = Project::new(&redis_url());
        project.pipeline(
            "guarded",
            "online:\n  key_prefix: g",
            "offline:\n  enabled: false",
        );
        project.serving_extra(lines);
        for command in ["validate", "run"] {
            let output = project.run_command(&[command]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(2),
                "{command} with {lines:?}: {stderr}"
            );
            assert!(
                stderr.contains(&format!("key `{key}`")) && stderr.contains(words),
                "{command} with {lines:?}: {stderr}"
            );
        }
    }
    // A cache needs one Redis server: tracking is per server connection.
    let project = Project::new(&redis_url());
    project.pipeline(
        "guarded",
        "online:\n  key_prefix: g",
        "offline:\n  enabled: false",
    );
    project.redis_extra("  mode: cluster");
    project.serving_extra("  cache_entities: 1000");
    for command in ["validate", "run"] {
        let output = project.run_command(&[command]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains("key `serving.cache_entities`") && stderr.contains("standalone"),
            "{command}: {stderr}"
        );
    }
    // One port for both listeners.
    let project = Project::new(&redis_url());
    project.pipeline(
        "guarded",
        "online:\n  key_prefix: g",
        "offline:\n  enabled: false",
    );
    let bind = format!("127.0.0.1:{}", project.http_port);
    let output = project
        .command_with_env(&["validate"], &[("FC_SERVING_BIND", &bind)])
        .output()
        .expect("validate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("key `serving.bind`") && stderr.contains("also http.bind"),
        "{stderr}"
    );
}

/// The serving status of `/v1/features` for one entity, `None` while nothing answers.
async fn read_status(project: &Project) -> Option<u16> {
    project
        .serving_get("/v1/features/back?user_id=user-1")
        .await
        .map(|(status, _)| status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_connect_again_when_redis_comes_back() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let project = Project::new(&url);
    project.pipeline(
        "back",
        "online:\n  key_prefix: back",
        "offline:\n  enabled: false",
    );
    project.produce("back", 20, 5, BASE, 0);
    // Redis is down when the connector starts: reads answer 503, they do not give up.
    let connector = project.start();
    wait_until("the serving listener", Duration::from_secs(60), || async {
        read_status(&project).await.is_some()
    })
    .await;
    assert_eq!(read_status(&project).await, Some(503));

    let dir = tempfile::tempdir().expect("redis dir");
    let server = PrivateRedis::start(port, dir.path()).ready(&url).await;
    wait_drained(&project.topic, &["back"], Duration::from_secs(60)).await;
    wait_until(
        "reads once Redis is up",
        Duration::from_secs(30),
        || async { read_status(&project).await == Some(200) },
    )
    .await;

    // A restart breaks the connection the reads shared; the next reads connect again.
    server.kill();
    wait_until(
        "reads while Redis is down",
        Duration::from_secs(30),
        || async { read_status(&project).await == Some(503) },
    )
    .await;
    let _server = PrivateRedis::start(port, dir.path()).ready(&url).await;
    wait_until(
        "reads after the restart",
        Duration::from_secs(30),
        || async { read_status(&project).await == Some(200) },
    )
    .await;
    let log = connector.log();
    assert_eq!(connector.stop(), 0, "{log}");
}
