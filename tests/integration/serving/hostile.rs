//! Hostile and broken requests against the real binary and Redis: each gets a clear 4xx
//! with a JSON error naming the problem (and the setting, for a limit; `{"error"}`, or
//! Feast's error detail on Feast's endpoint), none stalls the
//! server, and a normal read still works after all of them. Limits are set small here:
//! 5 entities, 4 KiB bodies, 1 s to send a request, 2 requests at once.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;

const LIMITS: &str = "  max_entities_per_request: 5\n  max_body_bytes: 4096\n  request_timeout: 1s\n  max_concurrent_requests: 2";

/// POSTs `body` (raw text) to `path`; (status, JSON body).
async fn post_raw(project: &Project, path: &str, body: String) -> (u16, Value) {
    let response = feature_connector::tls::http_client()
        .post(project.serving_url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("post");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let json =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {text}"));
    (status, json)
}

async fn post(project: &Project, path: &str, body: Value) -> (u16, Value) {
    post_raw(project, path, body.to_string()).await
}

/// Asserts an error answer: `status`, and an `error` holding `words`.
fn assert_error((status, body): (u16, Value), expected: u16, words: &str) {
    assert_eq!(status, expected, "{body}");
    let message = error_message(&body);
    assert!(message.contains(words), "expected {words:?} in {message:?}");
}

/// Opens a connection and sends `head` (and nothing more), as a slow client would.
async fn slow_client(project: &Project, head: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", project.serving_port))
        .await
        .expect("connect");
    stream.write_all(head.as_bytes()).await.expect("write");
    stream
}

/// Everything the server sends until it closes the connection (at most 10 s).
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn feast_body(entities: usize) -> Value {
    let users: Vec<String> = (0..entities).map(|e| format!("user-{e}")).collect();
    json!({"features": ["hostile:purchases_30d"], "entities": {"user_id": users}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_clear_4xx_and_do_not_stall_the_server() {
    let project = Project::new(&redis_url());
    project.pipeline(
        "hostile",
        &format!("online:\n  key_prefix: {}", unique("hostile")),
        "offline:\n  enabled: false",
    );
    project.serving_extra(LIMITS);
    project.produce("hostile", 20, 5, BASE, 0);
    let mut connector = project.start();
    wait_drained(&project.topic, &["hostile"], Duration::from_secs(60)).await;
    let feast = "/get-online-features";

    // Malformed and mis-shaped bodies.
    assert_error(
        post_raw(&project, feast, "{\"features\": [".into()).await,
        400,
        "not the JSON expected",
    );
    assert_error(
        post(
            &project,
            feast,
            json!({"features": ["hostile:x"], "entities": ["user-1"]}),
        )
        .await,
        400,
        "invalid type",
    );
    assert_error(
        post_raw(&project, "/v1/features/hostile", "nope".into()).await,
        400,
        "not the JSON expected",
    );
    // Unknown view, feature, feature service; a reference without a view.
    let entities = json!({"user_id": ["user-1"]});
    assert_error(
        post(
            &project,
            feast,
            json!({"features": ["ghost:x"], "entities": entities}),
        )
        .await,
        404,
        "no online feature view `ghost`",
    );
    assert_error(
        post(
            &project,
            feast,
            json!({"features": ["hostile:ghost"], "entities": entities}),
        )
        .await,
        400,
        "has no feature `ghost`",
    );
    assert_error(
        post(
            &project,
            feast,
            json!({"feature_service": "ghost", "entities": entities}),
        )
        .await,
        404,
        "no feature service `ghost`",
    );
    assert_error(
        post(
            &project,
            feast,
            json!({"features": ["purchases_30d"], "entities": entities}),
        )
        .await,
        400,
        "not `view:feature`",
    );
    let (status, _) = project
        .serving_get("/v1/features/ghost?user_id=1")
        .await
        .expect("get");
    assert_eq!(status, 404);
    // Wrong join key types and columns.
    assert_error(
        post(
            &project,
            feast,
            json!({"features": ["hostile:purchases_30d"], "entities": {"user_id": [42]}}),
        )
        .await,
        400,
        "join key `user_id` of view `hostile` takes a string; got 42",
    );
    assert_error(
        post(
            &project,
            feast,
            json!({"features": ["hostile:purchases_30d"], "entities": {"user": ["user-1"]}}),
        )
        .await,
        400,
        "no `user_id` column",
    );
    assert_error(post(&project, feast, json!({"features": ["hostile:purchases_30d"], "entities": {"user_id": ["a"], "other": [1, 2]}})).await, 400, "one value per entity");
    // Too many entities, on every read API.
    assert_error(
        post(&project, feast, feast_body(6)).await,
        413,
        "6 entities in one request; at most 5 (serving.max_entities_per_request)",
    );
    let six: Vec<Value> = (0..6)
        .map(|e| json!({"user_id": format!("user-{e}")}))
        .collect();
    assert_error(
        post(&project, "/v1/features/hostile", json!({"entities": six})).await,
        413,
        "serving.max_entities_per_request",
    );
    let query: Vec<String> = (0..6).map(|e| format!("user_id=user-{e}")).collect();
    let (status, body) = project
        .serving_get(&format!("/v1/features/hostile?{}", query.join("&")))
        .await
        .expect("get");
    assert_error(
        (status, serde_json::from_str(&body).expect("json")),
        413,
        "at most 5",
    );
    // A body over the limit: declared, and sent chunked without a length.
    let big = format!(
        "{{\"features\": [\"hostile:purchases_30d\"], \"entities\": {{\"user_id\": [\"{}\"]}}}}",
        "x".repeat(5000)
    );
    assert_error(
        post_raw(&project, feast, big.clone()).await,
        413,
        "over 4096 bytes (serving.max_body_bytes)",
    );
    let mut chunked = String::new();
    for chunk in big.as_bytes().chunks(1000) {
        chunked.push_str(&format!(
            "{:x}\r\n{}\r\n",
            chunk.len(),
            String::from_utf8_lossy(chunk)
        ));
    }
    let mut stream = slow_client(&project, &format!("POST {feast} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n{chunked}0\r\n\r\n")).await;
    let answer = read_to_close(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // Wrong method, unknown path.
    let response = get_url(project.serving_url(feast)).await.expect("get");
    assert_eq!(response.status().as_u16(), 405);
    let (status, _) = project.serving_get("/admin").await.expect("get");
    assert_eq!(status, 404);

    // A client that sends its body too slowly gets 408 after the request timeout.
    let started = Instant::now();
    let mut trickle = slow_client(&project, &format!("POST {feast} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"feat")).await;
    let answer = read_to_close(&mut trickle).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("serving.request_timeout"), "{answer}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    // One that never finishes its headers is disconnected.
    let started = Instant::now();
    let mut headers = slow_client(&project, &format!("POST {feast} HTTP/1.1\r\nhost: x\r\n")).await;
    let answer = read_to_close(&mut headers).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}: {answer}"
    );

    // Two slow clients hold both request slots: a third request is refused at once with
    // 429 and Retry-After, and served once the slots are free again.
    let head = format!("POST {feast} HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{{");
    let mut holders = vec![
        slow_client(&project, &head).await,
        slow_client(&project, &head).await,
    ];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let response = feature_connector::tls::http_client()
        .post(project.serving_url(feast))
        .json(&feast_body(1))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let error: Value = response.json().await.expect("json");
    assert!(
        error_message(&error).contains("serving.max_concurrent_requests"),
        "{error}"
    );
    for holder in &mut holders {
        assert!(read_to_close(holder).await.starts_with("HTTP/1.1 408"));
    }

    // Nothing stalled: a normal read answers, and the process is alive.
    let (status, answer) = post(&project, feast, feast_body(5)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["results"][1]["values"][4], json!(19 * 3));
    connector.assert_running();
    // Refusals are counted, by endpoint and status.
    let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
    for series in [
        r#"feature_connector_serving_requests_total{endpoint="get-online-features",code="429"} 1"#,
        r#"feature_connector_serving_requests_total{endpoint="v1-features",code="413"} 2"#,
        r#"feature_connector_serving_requests_total{endpoint="other",code="404"} 1"#,
    ] {
        assert!(metrics.contains(series), "{series} not in:\n{metrics}");
    }
    assert_eq!(connector.stop(), 0);
}
