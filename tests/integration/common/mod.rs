//! Helpers: a throw-away project folder, the connector binary, and the services' APIs.

#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use redis::AsyncCommands;

/// Pulsar admin REST URL.
pub fn pulsar_admin() -> String {
    std::env::var("PULSAR_ADMIN_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into())
}
/// A variable `scripts/services.sh env` sets (panics naming it when missing).
pub fn env_path(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} (set by scripts/services.sh env)"))
}

/// Pulsar binary URL.
pub fn pulsar_url() -> String {
    std::env::var("PULSAR_URL").unwrap_or_else(|_| "pulsar://127.0.0.1:6650".into())
}
/// The shared Redis.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}
/// The S3-compatible server.
pub fn s3_endpoint() -> String {
    std::env::var("S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9000".into())
}
/// Bucket created by the services script.
pub const S3_BUCKET: &str = "feature-connector-test";

/// A unique id for names in this run.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A temporary project: `config.yaml`, `connectors/`, `schemas/`.
pub struct Project {
    pub dir: tempfile::TempDir,
    pub topic: String,
    /// Port of the connector's HTTP endpoint (health, metrics).
    pub http_port: u16,
    /// Port of the connector's serving listener (feature reads).
    pub serving_port: u16,
}

/// A process's exit code, or 128 + the signal that ended it (as a shell reports it).
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(-1)
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Project {
    /// A project whose service file points at the test services (`redis_url` may differ).
    pub fn new(redis: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("connectors")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("schemas")).expect("mkdir");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/user_profile.avsc"),
            dir.path().join("schemas/user_profile.avsc"),
        )
        .expect("copy schema");
        let http_port = free_port();
        let serving_port = free_port();
        let config = format!(
            "pulsar:\n  url: {}\n  admin_url: {}\nredis:\n  url: {redis}\n  response_timeout: 5s\nobject_store:\n  default_url: file://offline\n  options:\n    aws_endpoint: {}\n    aws_region: us-east-1\n    aws_allow_http: \"true\"\n    aws_access_key_id: testing\n    aws_secret_access_key: testing\n    aws_virtual_hosted_style_request: \"false\"\nhttp:\n  bind: \"${{FC_HTTP_BIND-127.0.0.1:{http_port}}}\"\nserving:\n  bind: \"${{FC_SERVING_BIND-127.0.0.1:{serving_port}}}\"\nshutdown_timeout: 20s\n",
            pulsar_url(),
            pulsar_admin(),
            s3_endpoint()
        );
        std::fs::write(dir.path().join("config.yaml"), config).expect("write config");
        Self {
            dir,
            topic: format!("persistent://public/default/{}", unique("it")),
            http_port,
            serving_port,
        }
    }

    /// Adds lines (e.g. `  mode: cluster`) to the service file's `redis:` section.
    pub fn redis_extra(&self, lines: &str) {
        let path = self.path().join("config.yaml");
        let config = std::fs::read_to_string(&path).expect("read config");
        let config = config.replacen(
            "  response_timeout: 5s\n",
            &format!("  response_timeout: 5s\n{lines}\n"),
            1,
        );
        std::fs::write(path, config).expect("write config");
    }

    /// Points the service file at `url`/`admin_url` and replaces the rest of its `pulsar:`
    /// section with `extra` (whole lines, e.g. `  token_file: …` or an `  auth:` block).
    pub fn pulsar_section(&self, url: &str, admin_url: &str, extra: &str) {
        let path = self.path().join("config.yaml");
        let config = std::fs::read_to_string(&path).expect("read config");
        let start = config.find("pulsar:\n").expect("pulsar section");
        let end = config.find("redis:\n").expect("redis section");
        let section = format!("pulsar:\n  url: {url}\n  admin_url: {admin_url}\n{extra}");
        let config = format!("{}{section}{}", &config[..start], &config[end..]);
        std::fs::write(path, config).expect("write config");
    }

    /// GET a path of the connector's HTTP endpoint: (status, body).
    pub async fn http_get(&self, path: &str) -> Option<(u16, String)> {
        let response = get_url(format!("http://127.0.0.1:{}{path}", self.http_port))
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// Adds lines (e.g. `  max_entities_per_request: 5`) to the service file's `serving:`
    /// section.
    pub fn serving_extra(&self, lines: &str) {
        let path = self.path().join("config.yaml");
        let config = std::fs::read_to_string(&path).expect("read config");
        let config = config.replacen("serving:\n", &format!("serving:\n{lines}\n"), 1);
        std::fs::write(path, config).expect("write config");
    }

    /// GET a path of the connector's serving listener: (status, body).
    pub async fn serving_get(&self, path: &str) -> Option<(u16, String)> {
        let response = get_url(self.serving_url(path)).await.ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// `http://127.0.0.1:<serving port><path>`.
    pub fn serving_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.serving_port)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `connectors/{name}.yaml` for the user_profile schema on this project's topic.
    pub fn pipeline(&self, name: &str, online: &str, offline: &str) {
        self.pipeline_with_schema(name, "  file: schemas/user_profile.avsc", online, offline);
    }

    /// Writes `schemas/{file}` into the project.
    pub fn schema_file(&self, file: &str, json: &str) {
        std::fs::write(self.path().join("schemas").join(file), json).expect("write schema");
    }

    /// Like [`Project::pipeline`] with the lines of the `schema:` block given.
    pub fn pipeline_with_schema(
        &self,
        name: &str,
        schema_block: &str,
        online: &str,
        offline: &str,
    ) {
        self.write_pipeline(name, "", schema_block, online, offline);
    }

    /// Like [`Project::pipeline`] with `source.delivery` set (`shared`, the default, or
    /// `per_sink`: then the subscriptions are `{name}-online` and `{name}-offline`).
    pub fn pipeline_with_delivery(&self, name: &str, delivery: &str, online: &str, offline: &str) {
        self.pipeline_with_source(name, &format!("  delivery: {delivery}\n"), online, offline);
    }

    /// Like [`Project::pipeline`] with whole lines added to `source:` (e.g.
    /// `"  max_batch_messages: 500\n"`).
    pub fn pipeline_with_source(
        &self,
        name: &str,
        source_extra: &str,
        online: &str,
        offline: &str,
    ) {
        self.write_pipeline(
            name,
            source_extra,
            "  file: schemas/user_profile.avsc",
            online,
            offline,
        );
    }

    /// Writes `connectors/{name}.yaml`; `source_extra` holds whole lines added to `source:`.
    fn write_pipeline(
        &self,
        name: &str,
        source_extra: &str,
        schema_block: &str,
        online: &str,
        offline: &str,
    ) {
        let yaml = format!(
            "name: {name}\nsource:\n  topic: {}\n  subscription: {name}\n  initial_position: earliest\n{source_extra}schema:\n{schema_block}\nentity:\n  keys: [user_id]\n  event_time: event_time\nfeatures: all\n{online}\n{offline}\n",
            self.topic
        );
        std::fs::write(self.path().join(format!("connectors/{name}.yaml")), yaml)
            .expect("write pipeline");
    }

    /// Runs `produce` with extra arguments; asserts it succeeded and logged no WARN or
    /// ERROR line (producers closing after a large publish used to log two).
    pub fn produce_with(&self, pipeline: &str, args: &[&str]) {
        let output = self
            .command(&["produce", "--pipeline", pipeline])
            .args(args)
            .output()
            .expect("run produce");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "produce failed: {stderr}");
        assert_quiet("produce", &stderr);
    }

    /// Runs any subcommand of the binary on this project.
    pub fn run_command(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run feature-connector")
    }

    /// A command of the binary on this project with extra environment variables.
    ///
    /// A second connector given its own `FC_HTTP_BIND` and no `FC_SERVING_BIND` serves no
    /// feature reads: the project's serving port belongs to the first one.
    pub fn command_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = self.command(args);
        let names: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
        if names.contains(&"FC_HTTP_BIND") && !names.contains(&"FC_SERVING_BIND") {
            command.env("FC_SERVING_BIND", "");
        }
        command.envs(env.iter().copied());
        command
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_feature-connector"));
        command
            .args(args)
            .arg("--root")
            .arg(self.path())
            .arg("--config")
            .arg(self.path().join("config.yaml"))
            .env("RUST_LOG", "info,pulsar=warn")
            .env("FC_INSTANCE_ID", "it");
        command
    }

    /// Runs `produce` and asserts it succeeded.
    pub fn produce(&self, pipeline: &str, count: u64, entities: u64, base_ms: i64, batch: u32) {
        let (count, entities, base_ms, batch) = (
            count.to_string(),
            entities.to_string(),
            base_ms.to_string(),
            batch.to_string(),
        );
        self.produce_with(
            pipeline,
            &[
                "--count",
                &count,
                "--entities",
                &entities,
                "--base-ms",
                &base_ms,
                "--batch",
                &batch,
            ],
        );
    }

    /// Starts `run`, logging to `run.log` in the project.
    pub fn start(&self) -> Connector {
        self.start_with_env("run.log", &[])
    }

    /// Starts `run` with extra environment variables (as [`Project::command_with_env`] sets
    /// them), logging to `log_name`.
    pub fn start_with_env(&self, log_name: &str, env: &[(&str, &str)]) -> Connector {
        let log_path = self.path().join(log_name);
        let log = std::fs::File::create(&log_path).expect("log file");
        let child = self
            .command_with_env(&["run"], env)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start connector");
        Connector {
            child,
            log: log_path,
        }
    }

    /// Runs `validate` on this project.
    pub fn validate(&self) -> Output {
        self.command(&["validate"]).output().expect("run validate")
    }
}

/// A running connector process.
pub struct Connector {
    child: Child,
    log: PathBuf,
}

impl Connector {
    /// SIGTERM, then waits for the exit code.
    pub fn stop(mut self) -> i32 {
        self.wait_started();
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let status = self.child.wait().expect("wait connector");
        let code = exit_code(status);
        if code != 0 {
            // Shown with the failing assertion: why the connector did not stop cleanly.
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!(
                "connector exited with {status} on SIGTERM; the end of {}:\n{}",
                self.log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        code
    }

    /// Waits (up to 30 s) for the connector's `starting` line, written once its signal
    /// handlers are in place, or for its exit: a SIGTERM sent in the first milliseconds of
    /// the process (a test whose backlog was already drained) would otherwise end it by the
    /// signal's default action.
    fn wait_started(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let exited = matches!(self.child.try_wait(), Ok(Some(_)));
            let started = std::fs::read_to_string(&self.log)
                .is_ok_and(|log| log.contains("cli::run: starting"));
            if exited || started {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then the exit code and the whole log (shutdown included).
    pub fn stop_with_log(self) -> (i32, String) {
        let path = self.log.clone();
        let code = self.stop();
        (code, std::fs::read_to_string(path).unwrap_or_default())
    }

    /// SIGKILL: a crash, no shutdown work at all.
    pub fn kill_hard(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The connector's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("connector exited early with {status}:\n{}", self.log());
        }
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it returns true or `timeout` passes.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < timeout {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// `{admin}/admin/v2/persistent/{tenant}/{namespace}/{topic}/{what}` for a persistent `topic`.
pub fn topic_admin_url(topic: &str, what: &str) -> String {
    let path = topic
        .strip_prefix("persistent://")
        .expect("persistent topic");
    format!("{}/admin/v2/persistent/{path}/{what}", pulsar_admin())
}

/// GET `url` with a client built after the process's TLS provider is installed.
pub async fn get_url(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    feature_connector::tls::http_client().get(url).send().await
}

/// Sends an admin API request and asserts that the broker accepted it (`what` names it).
pub async fn admin_ok(request: reqwest::RequestBuilder, what: &str) {
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        response.status().is_success(),
        "{what}: {}",
        response.status()
    );
}

/// Backlog of `subscription` on `topic` from the admin API (`None` if it does not exist yet).
pub async fn backlog(topic: &str, subscription: &str) -> Option<u64> {
    for stats in ["stats", "partitioned-stats"] {
        let url = topic_admin_url(topic, stats);
        let Ok(response) = get_url(&url).await else {
            continue;
        };
        let Ok(stats) = response.json::<serde_json::Value>().await else {
            continue;
        };
        if let Some(backlog) = stats["subscriptions"][subscription]["msgBacklog"].as_u64() {
            return Some(backlog);
        }
    }
    None
}

/// The names of the subscriptions of `topic` (admin API, sorted; empty if the topic does not
/// exist yet).
pub async fn subscriptions(topic: &str) -> Vec<String> {
    let url = topic_admin_url(topic, "subscriptions");
    let Ok(response) = get_url(&url).await else {
        return Vec::new();
    };
    let mut names = response.json::<Vec<String>>().await.unwrap_or_default();
    names.sort();
    names
}

/// The type (`Failover`, `Key_Shared`, …) of `subscription` on a non-partitioned `topic`
/// while a consumer is attached, from the topic stats.
pub async fn subscription_type(topic: &str, subscription: &str) -> Option<String> {
    let url = topic_admin_url(topic, "stats");
    let stats = get_url(&url)
        .await
        .ok()?
        .json::<serde_json::Value>()
        .await
        .ok()?;
    stats["subscriptions"][subscription]["type"]
        .as_str()
        .map(str::to_string)
}

/// How many messages of a non-partitioned `topic` lie up to `subscription`'s mark-delete
/// position (the acknowledged prefix), from the topic's internal stats.
pub async fn acknowledged_prefix(topic: &str, subscription: &str) -> u64 {
    let url = topic_admin_url(topic, "internalStats");
    let stats: serde_json::Value = get_url(&url)
        .await
        .expect("admin API")
        .json()
        .await
        .expect("internal stats");
    let mark = stats["cursors"][subscription]["markDeletePosition"]
        .as_str()
        .expect("the subscription's cursor");
    let (ledger, entry) = mark.split_once(':').expect("ledger:entry");
    let (ledger, entry): (i64, i64) = (
        ledger.parse().expect("ledger id"),
        entry.parse().expect("entry id"),
    );
    let mut before = 0;
    for closed in stats["ledgers"].as_array().expect("ledgers") {
        if closed["ledgerId"].as_i64() == Some(ledger) {
            return before + u64::try_from(entry + 1).unwrap_or(0);
        }
        before += closed["entries"].as_u64().unwrap_or(0);
    }
    // The mark sits before the topic's first ledger: nothing acknowledged.
    0
}

/// Unloads a non-partitioned `topic`: the broker closes its current ledger and opens a new
/// one when the topic is next used, as after a broker restart.
pub async fn unload_topic(topic: &str) {
    let request = feature_connector::tls::http_client().put(topic_admin_url(topic, "unload"));
    admin_ok(request, &format!("unload {topic}")).await;
}

/// The message of a serving listener's error answer: `{"error": "…"}` (`/v1/features`, the
/// probes' listener), or on Feast's endpoint Feast's error detail: a JSON string holding
/// `{"module", "class", "message"}`.
pub fn error_message(body: &serde_json::Value) -> String {
    let field =
        |value: &serde_json::Value, key: &str| value[key].as_str().unwrap_or_default().to_string();
    match body.as_str() {
        Some(detail) => field(&serde_json::from_str(detail).unwrap_or_default(), "message"),
        None => field(body, "error"),
    }
}

/// Sets the namespace's retention so that acknowledged messages stay readable (backfill).
pub async fn retain_acknowledged(namespace: &str) {
    let request = feature_connector::tls::http_client()
        .post(format!(
            "{}/admin/v2/namespaces/public/{namespace}/retention",
            pulsar_admin()
        ))
        .header("content-type", "application/json")
        .body(r#"{"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}"#);
    admin_ok(request, "set retention").await;
}

/// The lines of a connector's log at WARN or ERROR level: a happy path has none, as those
/// levels are for what an operator must act on.
pub fn loud_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .collect()
}

/// Fails with the loud lines of `log` (`what` names the run), if there are any.
pub fn assert_quiet(what: &str, log: &str) {
    let loud = loud_lines(log);
    assert!(
        loud.is_empty(),
        "{what} logged {} WARN/ERROR lines on a happy path, e.g.:\n{}",
        loud.len(),
        loud.iter().take(10).copied().collect::<Vec<_>>().join("\n")
    );
}

/// Creates `topic` with `partitions` partitions.
pub async fn create_partitioned_topic(topic: &str, partitions: u32) {
    let request = feature_connector::tls::http_client()
        .put(topic_admin_url(topic, "partitions"))
        .header("content-type", "application/json")
        .body(partitions.to_string());
    admin_ok(request, "create partitioned topic").await;
}

/// Whether every subscription in `subscriptions` of `topic` has backlog 0.
pub async fn all_drained(topic: &str, subscriptions: &[&str]) -> bool {
    for subscription in subscriptions {
        if backlog(topic, subscription).await != Some(0) {
            return false;
        }
    }
    true
}

/// Waits until every subscription in `subscriptions` of `topic` has backlog 0.
pub async fn wait_drained(topic: &str, subscriptions: &[&str], timeout: Duration) {
    wait_until(
        &format!("{subscriptions:?} of {topic} to drain"),
        timeout,
        || all_drained(topic, subscriptions),
    )
    .await;
}

/// How long a test's own Redis command may take: redis-rs's default (500 ms) is shorter than
/// the stalls of a 2-core CI box running the suite in parallel, and a test's check is not the
/// place to judge Redis's latency.
pub const TEST_REDIS_TIMEOUT: Duration = Duration::from_secs(30);

/// A Redis connection.
pub async fn redis(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(TEST_REDIS_TIMEOUT))
        .set_response_timeout(Some(TEST_REDIS_TIMEOUT));
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("redis connection")
}

/// The object_store options of the test S3 server.
pub fn s3_options() -> std::collections::BTreeMap<String, String> {
    [
        ("aws_endpoint", s3_endpoint()),
        ("aws_region", "us-east-1".to_string()),
        ("aws_allow_http", "true".to_string()),
        ("aws_access_key_id", "testing".to_string()),
        ("aws_secret_access_key", "testing".to_string()),
        ("aws_virtual_hosted_style_request", "false".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// `s3://<test bucket>/<prefix>`.
pub fn s3_url(prefix: &str) -> String {
    format!("s3://{S3_BUCKET}/{prefix}")
}

/// `file://<project>/offline`, the projects' default offline store.
pub fn local_offline_url(project: &Project) -> String {
    format!("file://{}", project.path().join("offline").display())
}

/// The Delta table of `pipeline` in the store at `store_url` (loaded at its newest version).
pub async fn open_table(
    store_url: &str,
    pipeline: &str,
) -> (
    deltalake::DeltaTable,
    feature_connector::delta::TableLocation,
) {
    let store = feature_connector::delta::TableRoot::open(store_url, Path::new("/"), &s3_options())
        .expect("offline store");
    let location = store.table(pipeline).expect("table location");
    let mut table = deltalake::DeltaTable::new(location.log_store.clone());
    table.load().await.expect("load the Delta table");
    (table, location)
}

/// Every row of the table of `pipeline` (its active files only, as the Delta log lists them),
/// with the file each batch came from (path relative to the table).
pub async fn read_table(store_url: &str, pipeline: &str) -> Vec<(String, RecordBatch)> {
    let (table, location) = open_table(store_url, pipeline).await;
    let paths: Vec<String> = table
        .snapshot()
        .expect("snapshot")
        .log_data()
        .into_iter()
        .map(|file| file.path().to_string())
        .collect();
    let mut out = Vec::new();
    for path in paths {
        let bytes: Bytes = object_store::ObjectStoreExt::get(
            location.store.as_ref(),
            &object_store::path::Path::from(path.as_str()),
        )
        .await
        .expect("get file")
        .bytes()
        .await
        .expect("read file");
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .expect("parquet footer")
            .build()
            .expect("parquet reader");
        for batch in reader {
            out.push((path.clone(), batch.expect("parquet batch")));
        }
    }
    out
}

/// The `(user_id, event_time in ms)` of each row of a table batch; `None` for a null user id.
pub fn event_ids(batch: &RecordBatch) -> Vec<(Option<String>, i64)> {
    let users = arrow::compute::cast(
        batch.column_by_name("user_id").expect("user_id column"),
        &arrow::datatypes::DataType::Utf8,
    )
    .expect("cast");
    let users = users
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .expect("strings");
    let times = arrow::compute::cast(
        batch.column_by_name("event_time").expect("event_time"),
        &arrow::datatypes::DataType::Int64,
    )
    .expect("cast");
    let times = times
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .expect("int64");
    (0..batch.num_rows())
        .map(|row| {
            let user =
                arrow::array::Array::is_valid(users, row).then(|| users.value(row).to_string());
            (user, times.value(row))
        })
        .collect()
}

/// Number of rows of the table, asserting no `(user_id, event_time)` appears twice.
pub async fn unique_events(store_url: &str, pipeline: &str) -> usize {
    let mut seen = std::collections::HashSet::new();
    for (file, batch) in read_table(store_url, pipeline).await {
        for (row, (user, time)) in event_ids(&batch).into_iter().enumerate() {
            let user = user.unwrap_or_else(|| panic!("row {row} of {file} has no user_id"));
            assert!(
                seen.insert((user, time)),
                "row {row} of {file} is a duplicate"
            );
        }
    }
    seen.len()
}

/// Creates namespace `public/{namespace}` with the given schema compatibility strategy.
pub async fn create_namespace(namespace: &str, strategy: &str) {
    let http = feature_connector::tls::http_client();
    let url = format!("{}/admin/v2/namespaces/public/{namespace}", pulsar_admin());
    admin_ok(http.put(&url), "create namespace").await;
    let request = http
        .put(format!("{url}/schemaCompatibilityStrategy"))
        .header("content-type", "application/json")
        .body(format!("\"{strategy}\""));
    admin_ok(request, "set strategy").await;
}

/// Publishes raw payloads (no schema) to `topic`.
pub async fn publish_raw(topic: &str, payloads: Vec<Vec<u8>>) {
    let pulsar = pulsar::Pulsar::builder(pulsar_url(), pulsar::TokioExecutor)
        .build()
        .await
        .expect("pulsar client");
    let mut producer = pulsar
        .producer()
        .with_topic(topic)
        .build()
        .await
        .expect("raw producer");
    for payload in payloads {
        producer
            .create_message()
            .with_content(payload)
            .with_key("raw")
            .with_property("origin", "test")
            .send_non_blocking()
            .await
            .expect("send")
            .await
            .expect("receipt");
    }
}

/// Publishes `(key, payload)` messages (no schema) to `topic`, a partitioned one routed by
/// key.
pub async fn publish_keyed(topic: &str, messages: Vec<(String, Vec<u8>)>) {
    let pulsar = pulsar::Pulsar::builder(pulsar_url(), pulsar::TokioExecutor)
        .build()
        .await
        .expect("pulsar client");
    let mut producer = pulsar
        .producer()
        .with_topic(topic)
        .build()
        .await
        .expect("keyed producer");
    // A bounded number in flight: the client refuses sends beyond its queue (SlowDown).
    for chunk in messages.chunks(100) {
        let mut receipts = Vec::with_capacity(chunk.len());
        for (key, payload) in chunk {
            receipts.push(
                producer
                    .create_message()
                    .with_content(payload.clone())
                    .with_key(key.clone())
                    .send_non_blocking()
                    .await
                    .expect("send"),
            );
        }
        for receipt in receipts {
            receipt.await.expect("receipt");
        }
    }
}

/// Reads every message of a dead-letter topic (waits until `expected` arrived, then 2 s more
/// to be sure nothing else comes) and returns their properties.
pub async fn read_dead_letters(
    topic: &str,
    expected: usize,
) -> Vec<std::collections::HashMap<String, String>> {
    use futures::StreamExt;
    let pulsar = pulsar::Pulsar::builder(pulsar_url(), pulsar::TokioExecutor)
        .build()
        .await
        .expect("pulsar client");
    let mut consumer: pulsar::Consumer<Vec<u8>, pulsar::TokioExecutor> = pulsar
        .consumer()
        .with_topic(topic)
        .with_subscription(unique("dlq-reader"))
        .with_subscription_type(pulsar::message::proto::command_subscribe::SubType::Exclusive)
        .with_options(pulsar::ConsumerOptions {
            initial_position: pulsar::consumer::InitialPosition::Earliest,
            ..Default::default()
        })
        .build()
        .await
        .expect("dlq consumer");
    let mut found = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let wait = if found.len() >= expected {
            Duration::from_secs(2)
        } else {
            deadline.saturating_duration_since(Instant::now())
        };
        match tokio::time::timeout(wait, consumer.next()).await {
            Ok(Some(Ok(message))) => {
                consumer.ack(&message).await.expect("ack dlq");
                found.push(
                    message
                        .metadata()
                        .properties
                        .iter()
                        .map(|kv| (kv.key.clone(), kv.value.clone()))
                        .collect(),
                );
            }
            _ => break,
        }
    }
    found
}

/// A redis-server of a test's own, on its own port.
pub struct PrivateRedis {
    child: Child,
}

impl PrivateRedis {
    /// Starts it without persistence.
    pub fn start(port: u16, dir: &std::path::Path) -> Self {
        Self::start_with(port, dir, &["--save", "", "--appendonly", "no"])
    }

    /// Starts it with extra `redis-server` arguments.
    pub fn start_with(port: u16, dir: &std::path::Path, extra: &[&str]) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(extra)
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/services.sh installs it)");
        Self { child }
    }

    /// Waits until it answers at `url` (which may carry its password).
    pub async fn ready(self, url: &str) -> Self {
        wait_until("private redis", Duration::from_secs(10), || redis_up(url)).await;
        self
    }

    /// SIGKILL, as a crash would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a Redis at `url` accepts a connection.
pub async fn redis_up(url: &str) -> bool {
    match redis::Client::open(url) {
        Ok(client) => client.get_multiplexed_async_connection().await.is_ok(),
        Err(_) => false,
    }
}

/// Event time of event 0 in the tests that check newest values with [`assert_newest_values`].
pub const BASE: i64 = 1_791_000_000_000;

/// For events `0..events` of `entities` entities (event i → entity i % entities, event time
/// BASE + i), Redis holds each entity's newest one under the native layout.
pub async fn assert_newest_values(prefix: &str, view: &str, events: u64, entities: u64) {
    assert_newest_values_in(&redis_url(), prefix, view, events, entities).await;
}

/// [`assert_newest_values`] in the Redis at `url`.
pub async fn assert_newest_values_in(
    url: &str,
    prefix: &str,
    view: &str,
    events: u64,
    entities: u64,
) {
    let mut redis = redis(url).await;
    for entity in 0..entities {
        let stored: HashMap<String, Vec<u8>> = redis
            .hgetall(format!("{prefix}:{view}:user-{entity}"))
            .await
            .expect("hgetall");
        let newest = events - entities + entity;
        assert_eq!(
            stored.get("_ts"),
            Some(&(BASE + newest as i64).to_string().into_bytes()),
            "entity {entity}"
        );
    }
}

/// The sizes of the files each commit of the table added, in commit order (from the log).
pub async fn commit_file_sizes(store_url: &str, pipeline: &str) -> Vec<Vec<u64>> {
    let (table, _) = open_table(store_url, pipeline).await;
    let latest = table.version().expect("a loaded table");
    let log_store = table.log_store();
    let mut out = Vec::new();
    for version in 1..=latest {
        let Some(bytes) = log_store
            .read_commit_entry(version)
            .await
            .expect("read commit")
        else {
            continue;
        };
        let actions = deltalake::logstore::get_actions(version, &bytes).expect("parse commit");
        out.push(
            actions
                .iter()
                .filter_map(|a| match a {
                    deltalake::kernel::Action::Add(add) => Some(add.size as u64),
                    _ => None,
                })
                .collect(),
        );
    }
    out
}
