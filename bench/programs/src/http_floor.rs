//! The serving benchmark's floor (bench/serving.py): what any HTTP server built on the
//! connector's stack (hyper's HTTP/1.1 over one current-thread tokio runtime, as
//! `serving.threads: 1`) costs a request on this box before it does any work of its own.
//!
//! - `canned`: reads the request, answers a fixed body as long as the connector's
//!   one-entity Feast answer: no Redis, no JSON;
//! - `redis`: the same, after one `HMGET` of `--fields` fields of a random key on one
//!   multiplexed Redis connection shared by all requests (as the connector's reader);
//! - `axum-canned`: the canned body through an axum router, with hyper's header timer on
//!   as the connector's listener sets it: what the framework adds to `canned`.
//!
//! ```text
//! cargo run --profile dist -p feature-connector-bench --bin http_floor -- --bind 127.0.0.1:6570 --mode canned
//! ```

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Canned,
    Redis,
    AxumCanned,
}

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6570")]
    bind: String,
    /// What a request does.
    #[arg(long, value_enum, default_value = "canned")]
    mode: Mode,
    /// Redis for `--mode redis`.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Key prefix of the hashes read (`<prefix><n>`, n below `--entities`).
    #[arg(long, default_value = "floor:")]
    prefix: String,
    /// Keys to pick from.
    #[arg(long, default_value_t = 100_000)]
    entities: u64,
    /// Fields read per `HMGET`.
    #[arg(long, default_value_t = 11)]
    fields: usize,
    /// Bytes of the canned answer.
    #[arg(long, default_value_t = 760)]
    answer_bytes: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(args))
}

async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind(&args.bind).await?;
    let answer = Bytes::from(format!(
        "{{\"x\":\"{}\"}}",
        "y".repeat(args.answer_bytes.saturating_sub(8))
    ));
    if let Mode::AxumCanned = args.mode {
        let body = answer.clone();
        let router = axum::Router::new().route(
            "/get-online-features",
            axum::routing::post(move |_b: axum::body::Bytes| {
                let body = body.clone();
                async move { body }
            }),
        );
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let connection = http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(
                    TokioIo::new(stream),
                    hyper_util::service::TowerToHyperService::new(router.clone()),
                );
            tokio::spawn(async move {
                let _ = connection.await;
            });
        }
    }
    let redis = match args.mode {
        Mode::Canned | Mode::AxumCanned => None,
        Mode::Redis => Some(
            redis::Client::open(args.redis.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        ),
    };
    let fields: Arc<Vec<String>> = Arc::new((0..args.fields).map(|i| format!("f{i}")).collect());
    let counter = Arc::new(AtomicU64::new(0x9E37_79B9_7F4A_7C15));
    let (prefix, entities) = (Arc::new(args.prefix), args.entities.max(1));
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let (answer, redis, fields, counter, prefix) = (
            answer.clone(),
            redis.clone(),
            fields.clone(),
            counter.clone(),
            prefix.clone(),
        );
        let service = service_fn(move |request: Request<hyper::body::Incoming>| {
            let (answer, mut redis, fields, counter, prefix) = (
                answer.clone(),
                redis.clone(),
                fields.clone(),
                counter.clone(),
                prefix.clone(),
            );
            async move {
                let _ = request.into_body().collect().await;
                if let Some(connection) = redis.as_mut() {
                    // xorshift: a random key without a dependency.
                    let mut x = counter.load(Ordering::Relaxed);
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    counter.store(x, Ordering::Relaxed);
                    let key = format!("{prefix}{}", x % entities);
                    let _: redis::RedisResult<Vec<Option<Vec<u8>>>> = redis::cmd("HMGET")
                        .arg(key)
                        .arg(fields.as_slice())
                        .query_async(connection)
                        .await;
                }
                Ok::<_, Infallible>(Response::new(Full::new(answer)))
            }
        });
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
