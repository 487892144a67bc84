//! The serving benchmark's load generator (bench/serving.py): online reads of random
//! entities at a fixed concurrency (closed loop) or at a fixed rate (open loop), against
//!
//! - `feast`: `POST /get-online-features` (ours or `feast serve`'s), naming every feature;
//! - `v1`: our `/v1/features/{view}`: `GET ?key=…` for one entity, `POST {"entities": […]}`
//!   for several;
//! - `redis`: Redis directly, the Feast layout's keys and fields, one `HMGET` per entity
//!   (`_ts:<view>` and the features, as the connector's reader asks), a request's entities
//!   in one pipeline on one multiplexed connection shared by every request in flight (as the
//!   connector's reader does): the ceiling of any server in front of this Redis.
//!
//! Written for a small box where the client shares the cores with the server: a
//! single-threaded runtime (`--threads` adds more, each with its share of the connections),
//! HTTP/1.1 keep-alive connections spoken directly over TCP (the request bytes prepared into
//! a reused buffer, the answer read up to its length and not parsed), so that the client
//! costs the box as little CPU as it can. Its own CPU is reported so that one can see whether
//! it was the bottleneck, and so is the CPU of the processes named with `--pid label=PID`
//! (summed per label) over the measured window.
//!
//! Latency is from the request's send to its whole answer; in the open loop (`--rate`), a
//! request that could not be sent on time because its connection was still busy counts from
//! when it should have been sent (no coordinated omission), while the timer's own lateness
//! (tokio's timer fires on the next millisecond) is not counted against the server.
//!
//! ```text
//! cargo run --profile dist -p feature-connector-bench --bin serving_load -- \
//!   --mode feast --target 127.0.0.1:6566 --view serving_bench \
//!   --features clicks_1h,views_1h --key entity_id --entities 100000 \
//!   --batch 50 --connections 16 --warmup 2s --duration 10s [--rate 1000] [--pid server=123]
//! ```
//!
//! Prints one JSON line: requests, errors (by HTTP status or I/O), requests/s, latency
//! percentiles in ms, CPU seconds of the client and of each `--pid` label.

// The client's own CPU time comes from getrusage(2) and sysconf(3) through libc; a
// benchmark stops at the first broken invariant of its connections.
#![allow(unsafe_code, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// `POST /get-online-features`.
    Feast,
    /// `/v1/features/{view}`.
    V1,
    /// `HMGET`s straight to Redis.
    Redis,
}

/// Options.
#[derive(Debug, Clone, Parser)]
struct Args {
    #[arg(long, value_enum)]
    mode: Mode,
    /// `host:port` of the HTTP server, or the Redis URL in `redis` mode.
    #[arg(long)]
    target: String,
    /// The feature view (the pipeline).
    #[arg(long)]
    view: String,
    /// Feast project (the key suffix of the Feast layout), for `redis` mode.
    #[arg(long, default_value = "")]
    project: String,
    /// The view's features, comma-separated (all of them are asked for).
    #[arg(long, value_delimiter = ',')]
    features: Vec<String>,
    /// The join key (a string key, values `<prefix><n>`).
    #[arg(long, default_value = "entity_id")]
    key: String,
    /// The join key values' prefix.
    #[arg(long, default_value = "entity-")]
    key_prefix: String,
    /// Entities `0..entities` are drawn uniformly at random.
    #[arg(long)]
    entities: u64,
    /// Entities per request.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Requests in flight at once (HTTP: one keep-alive connection each).
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Time before the measured window (requests sent, not counted).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// The measured window.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Requests per second over all connections (open loop); closed loop when not given.
    #[arg(long)]
    rate: Option<f64>,
    /// `label=PID`: a process whose CPU over the measured window is reported (repeat a label
    /// to sum processes, e.g. a server's workers).
    #[arg(long = "pid")]
    pids: Vec<String>,
    /// Client threads, each a single-threaded runtime with its share of the connections
    /// (and, in `redis` mode, a multiplexed connection of its own).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Also write every latency of the window (µs, u32 little-endian) to this file, so that
    /// several runs can be pooled.
    #[arg(long)]
    latencies: Option<std::path::PathBuf>,
    /// Seed of the entity draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// What one connection measured in the window.
#[derive(Default)]
struct Tally {
    /// Latency of each answered request, in µs.
    latencies_us: Vec<u32>,
    /// Errors by kind (`http 429`, `io`, …).
    errors: BTreeMap<String, u64>,
    /// Requests whose answer said an entity was not found (`redis` mode only).
    misses: u64,
}

impl Tally {
    fn error(&mut self, kind: String) {
        *self.errors.entry(kind).or_default() += 1;
    }
}

/// A xorshift draw of entity numbers (each connection its own stream).
struct Draw(u64);

impl Draw {
    fn next(&mut self, below: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x % below
    }
}

/// Builds each request's bytes from the entities drawn.
struct Requests {
    args: Args,
    host: String,
    /// The JSON body before the first entity value (`feast`) / the list of entities (`v1`).
    body_head: String,
    body_tail: &'static str,
}

impl Requests {
    fn new(args: Args) -> Self {
        let host = args.target.clone();
        let body_head = match args.mode {
            Mode::Feast => {
                let features: Vec<String> = args
                    .features
                    .iter()
                    .map(|f| format!("\"{}:{f}\"", args.view))
                    .collect();
                format!(
                    "{{\"features\":[{}],\"full_feature_names\":false,\"entities\":{{\"{}\":[",
                    features.join(","),
                    args.key
                )
            }
            _ => "{\"entities\":[".to_string(),
        };
        let body_tail = match args.mode {
            Mode::Feast => "]}}",
            _ => "]}",
        };
        Self {
            args,
            host,
            body_head,
            body_tail,
        }
    }

    /// The HTTP request for `batch` entities drawn from `draw`, into `out`.
    fn http(&self, draw: &mut Draw, out: &mut Vec<u8>, body: &mut Vec<u8>) {
        use std::io::Write;
        let a = &self.args;
        out.clear();
        if a.mode == Mode::V1 && a.batch == 1 {
            let n = draw.next(a.entities);
            let _ = write!(
                out,
                "GET /v1/features/{}?{}={}{n} HTTP/1.1\r\nHost: {}\r\n\r\n",
                a.view, a.key, a.key_prefix, self.host
            );
            return;
        }
        body.clear();
        body.extend_from_slice(self.body_head.as_bytes());
        for i in 0..a.batch {
            if i > 0 {
                body.push(b',');
            }
            let n = draw.next(a.entities);
            let _ = match a.mode {
                Mode::Feast => write!(body, "\"{}{n}\"", a.key_prefix),
                _ => write!(body, "{{\"{}\":\"{}{n}\"}}", a.key, a.key_prefix),
            };
        }
        body.extend_from_slice(self.body_tail.as_bytes());
        let path = match a.mode {
            Mode::Feast => "/get-online-features".to_string(),
            _ => format!("/v1/features/{}", a.view),
        };
        let _ = write!(
            out,
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        out.extend_from_slice(body);
    }
}

/// One keep-alive HTTP/1.1 connection.
struct Connection {
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Connection {
    /// Sends `request` and reads the whole answer; its status.
    async fn exchange(&mut self, target: &str, request: &[u8]) -> io::Result<u16> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(target).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(stream);
        }
        let result = self.exchange_on_open(request).await;
        if !matches!(result, Ok((_, true))) {
            // An error, or the server closes the connection: the next request reconnects.
            self.stream = None;
        }
        result.map(|(status, _)| status)
    }

    async fn exchange_on_open(&mut self, request: &[u8]) -> io::Result<(u16, bool)> {
        let stream = self.stream.as_mut().expect("connected");
        stream.write_all(request).await?;
        self.buf.clear();
        let mut searched: usize = 0;
        let head_end = loop {
            if read_more(stream, &mut self.buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            if let Some(at) = find(&self.buf[searched.saturating_sub(3)..], b"\r\n\r\n") {
                break searched.saturating_sub(3) + at + 4;
            }
            searched = self.buf.len();
        };
        let head = std::str::from_utf8(&self.buf[..head_end])
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "answer head not UTF-8"))?;
        let status: u16 = head
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no status line"))?;
        let mut length = None;
        let mut chunked = false;
        let mut keep_alive = true;
        for line in head.split("\r\n").skip(1) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                keep_alive = !value.eq_ignore_ascii_case("close");
            }
        }
        if chunked {
            self.read_chunked(head_end).await?;
        } else if let Some(length) = length {
            while self.buf.len() < head_end + length {
                let stream = self.stream.as_mut().expect("connected");
                if read_more(stream, &mut self.buf).await? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
        } else {
            // No length: the body ends with the connection.
            let stream = self.stream.as_mut().expect("connected");
            while read_more(stream, &mut self.buf).await? > 0 {}
            keep_alive = false;
        }
        Ok((status, keep_alive))
    }

    /// Reads a chunked body starting at `at` up to its last chunk (no trailers expected).
    async fn read_chunked(&mut self, mut at: usize) -> io::Result<()> {
        loop {
            let line_end = loop {
                if let Some(end) = find(&self.buf[at..], b"\r\n") {
                    break at + end;
                }
                self.fill().await?;
            };
            let size_text = std::str::from_utf8(&self.buf[at..line_end]).unwrap_or("");
            let size_text = size_text.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            let next = line_end + 2 + size + 2;
            while self.buf.len() < next {
                self.fill().await?;
            }
            if size == 0 {
                return Ok(());
            }
            at = next;
        }
    }

    async fn fill(&mut self) -> io::Result<()> {
        let stream = self.stream.as_mut().expect("connected");
        if read_more(stream, &mut self.buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    if buf.capacity() - buf.len() < 16 * 1024 {
        buf.reserve(64 * 1024);
    }
    stream.read_buf(buf).await
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The Feast layout's Redis key of a string join key: entity key serialization v3 and the
/// project (see `src/sink/redis/feast_proto.rs`).
fn feast_key(key: &str, value: &str, project: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + key.len() + value.len() + project.len());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(project.as_bytes());
    out
}

/// A feature's hash field in the Feast layout: MurmurHash3 x86 32 of `view:feature`, LE.
fn feast_field(view: &str, feature: &str) -> Vec<u8> {
    let text = format!("{view}:{feature}");
    murmur3::murmur3_32(&mut io::Cursor::new(text.as_bytes()), 0)
        .unwrap_or(0)
        .to_le_bytes()
        .to_vec()
}

/// When requests are sent and when they count.
#[derive(Clone, Copy)]
struct Window {
    /// Measurement starts.
    start: Instant,
    /// Nothing is sent from here on.
    end: Instant,
    /// Open loop: the interval between one connection's requests, and its first send.
    pace: Option<(Duration, Instant)>,
}

impl Window {
    /// Waits for the `n`th send time of the open loop; the time the latency counts from.
    async fn next_send(&self, n: u64) -> Instant {
        let Some((interval, first)) = self.pace else {
            return Instant::now();
        };
        let due = first + interval.mul_f64(n as f64);
        if Instant::now() < due {
            tokio::time::sleep_until(due).await;
            // Sent on time: the timer's lateness is the client's, not the server's.
            Instant::now()
        } else {
            // Late because this connection was still waiting for an answer: counts from
            // when the request should have gone.
            due
        }
    }

    fn record(&self, tally: &mut Tally, sent: Instant, done: Instant) {
        if sent >= self.start && sent < self.end {
            let us = done.duration_since(sent).as_micros();
            tally
                .latencies_us
                .push(u32::try_from(us).unwrap_or(u32::MAX));
        }
    }

    fn counts(&self, sent: Instant) -> bool {
        sent >= self.start && sent < self.end
    }
}

async fn http_loop(requests: Rc<Requests>, window: Window, seed: u64) -> Tally {
    let mut tally = Tally::default();
    let mut draw = Draw(seed | 1);
    let mut connection = Connection {
        stream: None,
        buf: Vec::with_capacity(64 * 1024),
    };
    let (mut request, mut body) = (Vec::with_capacity(4096), Vec::with_capacity(4096));
    let mut n = 0;
    loop {
        requests.http(&mut draw, &mut request, &mut body);
        let sent = window.next_send(n).await;
        n += 1;
        if sent >= window.end {
            break;
        }
        let result = connection.exchange(&requests.host, &request).await;
        let done = Instant::now();
        match result {
            Ok(200) => window.record(&mut tally, sent, done),
            Ok(status) if window.counts(sent) => tally.error(format!("http {status}")),
            Err(e) if window.counts(sent) => tally.error(format!("io: {}", e.kind())),
            Ok(_) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    tally
}

async fn redis_loop(
    requests: Rc<Requests>,
    mut redis: redis::aio::MultiplexedConnection,
    window: Window,
    seed: u64,
) -> Tally {
    let a = &requests.args;
    let mut fields = vec![format!("_ts:{}", a.view).into_bytes()];
    fields.extend(a.features.iter().map(|f| feast_field(&a.view, f)));
    let mut tally = Tally::default();
    let mut draw = Draw(seed | 1);
    let mut n = 0;
    loop {
        let mut pipe = redis::pipe();
        for _ in 0..a.batch {
            let value = format!("{}{}", a.key_prefix, draw.next(a.entities));
            pipe.cmd("HMGET")
                .arg(feast_key(&a.key, &value, &a.project))
                .arg(&fields);
        }
        let sent = window.next_send(n).await;
        n += 1;
        if sent >= window.end {
            break;
        }
        let result: redis::RedisResult<Vec<Vec<Option<Vec<u8>>>>> =
            pipe.query_async(&mut redis).await;
        let done = Instant::now();
        match result {
            Ok(rows) => {
                window.record(&mut tally, sent, done);
                if window.counts(sent)
                    && rows
                        .iter()
                        .any(|row| row.first().is_none_or(Option::is_none))
                {
                    tally.misses += 1;
                }
            }
            Err(e) if window.counts(sent) => tally.error(format!("redis: {:?}", e.kind())),
            Err(_) => {}
        }
    }
    tally
}

/// utime + stime of a process (all its threads), in seconds.
fn process_cpu(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// This process's CPU seconds (user + system).
fn own_cpu() -> f64 {
    // SAFETY: getrusage writes into the struct given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// CPU seconds per label, summed over its processes.
fn cpu_by_label(pids: &[(String, u32)]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (label, pid) in pids {
        *out.entry(label.clone()).or_insert(0.0) += process_cpu(*pid).unwrap_or(f64::NAN);
    }
    out
}

fn percentile(sorted: &[u32], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let index = ((p / 100.0) * sorted.len() as f64) as usize;
    Some(f64::from(sorted[index.min(sorted.len() - 1)]) / 1000.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.entities == 0 || args.batch == 0 || args.connections == 0 || args.threads == 0 {
        return Err("--entities, --batch, --connections and --threads must be at least 1".into());
    }
    if args.features.is_empty() {
        return Err("--features: name the view's features".into());
    }
    let pids: Vec<(String, u32)> = args
        .pids
        .iter()
        .map(|p| {
            let (label, pid) = p.split_once('=').ok_or("--pid takes label=PID")?;
            Ok::<_, Box<dyn std::error::Error>>((label.to_string(), pid.parse()?))
        })
        .collect::<Result<_, _>>()?;
    let (mode, connections, batch, rate) = (args.mode, args.connections, args.batch, args.rate);
    let now = Instant::now();
    let start = now + args.warmup;
    let window = Window {
        start,
        end: start + args.duration,
        pace: rate.map(|rate| (Duration::from_secs_f64(connections as f64 / rate), now)),
    };
    // Each thread its own single-threaded runtime and its share of the connections.
    let threads: Vec<_> = (0..args.threads)
        .map(|thread| {
            let args = args.clone();
            std::thread::spawn(move || -> Result<Tally, String> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                let local = tokio::task::LocalSet::new();
                local
                    .block_on(&runtime, run_thread(args, thread, window))
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    // CPU over the measured window, read as it starts and ends.
    sleep_until(window.start);
    let (client_before, cpu_before) = (own_cpu(), cpu_by_label(&pids));
    sleep_until(window.end);
    let (client_after, cpu_after) = (own_cpu(), cpu_by_label(&pids));
    let mut total = Tally::default();
    for thread in threads {
        let tally = thread.join().map_err(|_| "a load thread panicked")??;
        total.latencies_us.extend(tally.latencies_us);
        for (kind, n) in tally.errors {
            *total.errors.entry(kind).or_default() += n;
        }
        total.misses += tally.misses;
    }
    let seconds = window.end.duration_since(window.start).as_secs_f64();
    let mut latencies = total.latencies_us;
    if let Some(path) = &args.latencies {
        let bytes: Vec<u8> = latencies.iter().flat_map(|l| l.to_le_bytes()).collect();
        std::fs::write(path, bytes)?;
    }
    latencies.sort_unstable();
    let requests_done = latencies.len();
    let mean = if latencies.is_empty() {
        None
    } else {
        Some(latencies.iter().map(|&l| f64::from(l)).sum::<f64>() / latencies.len() as f64 / 1000.0)
    };
    let cpu: BTreeMap<String, f64> = cpu_after
        .iter()
        .map(|(label, after)| {
            (
                label.clone(),
                after - cpu_before.get(label).copied().unwrap_or(0.0),
            )
        })
        .collect();
    let out = serde_json::json!({
        "mode": format!("{mode:?}").to_lowercase(),
        "batch": batch,
        "connections": connections,
        "threads": args.threads,
        "rate": rate,
        "seconds": seconds,
        "requests": requests_done,
        "requests_per_s": requests_done as f64 / seconds,
        "errors": total.errors,
        "misses": total.misses,
        "mean_ms": mean,
        "p50_ms": percentile(&latencies, 50.0),
        "p90_ms": percentile(&latencies, 90.0),
        "p99_ms": percentile(&latencies, 99.0),
        "p999_ms": percentile(&latencies, 99.9),
        "max_ms": latencies.last().map(|&l| f64::from(l) / 1000.0),
        "client_cpu_s": client_after - client_before,
        "cpu_s": cpu,
    });
    println!("{out}");
    Ok(())
}

fn sleep_until(at: Instant) {
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
}

/// Thread `thread`'s connections (every `threads`th of them), until the window ends.
async fn run_thread(args: Args, thread: usize, window: Window) -> redis::RedisResult<Tally> {
    let (mode, connections, threads, seed) = (args.mode, args.connections, args.threads, args.seed);
    // One multiplexed connection per thread shared by its requests, as the connector's
    // reader shares one.
    let redis = if mode == Mode::Redis {
        Some(
            redis::Client::open(args.target.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        )
    } else {
        None
    };
    let requests = Rc::new(Requests::new(args));
    let mut tasks = Vec::new();
    for c in (thread..connections).step_by(threads) {
        let mut window = window;
        // Open loop: the connections' send times spread evenly over one interval.
        if let Some((interval, first)) = window.pace {
            window.pace = Some((
                interval,
                first + interval.mul_f64(c as f64 / connections as f64),
            ));
        }
        let seed = seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(c as u64 + 1);
        let requests = requests.clone();
        tasks.push(match &redis {
            Some(connection) => {
                tokio::task::spawn_local(redis_loop(requests, connection.clone(), window, seed))
            }
            None => tokio::task::spawn_local(http_loop(requests, window, seed)),
        });
    }
    let mut total = Tally::default();
    for task in tasks {
        let tally = task.await.expect("a connection task panicked");
        total.latencies_us.extend(tally.latencies_us);
        for (kind, n) in tally.errors {
            *total.errors.entry(kind).or_default() += n;
        }
        total.misses += tally.misses;
    }
    Ok(total)
}
