//! Geo-replicated Pulsar: a sidecar per region against its own cluster (the second broker
//! of `scripts/services.sh start-geo`), one Redis per region, one shared offline table.

mod active_active;
mod standby;
mod ties;

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

/// The first region: the main broker.
pub struct Region {
    pub cluster: String,
    pub url: String,
    pub admin: String,
}

/// The two regions of the test services; fails with the way out when the second broker is
/// not running.
pub fn regions() -> [Region; 2] {
    let b_url = std::env::var("PULSAR_B_URL").unwrap_or_default();
    assert!(
        !b_url.is_empty(),
        "the second Pulsar cluster is not running: `bash scripts/services.sh start-geo`, then \
         `source .services/env`"
    );
    [
        Region {
            cluster: std::env::var("PULSAR_A_CLUSTER").unwrap_or_else(|_| "standalone".into()),
            url: pulsar_url(),
            admin: pulsar_admin(),
        },
        Region {
            cluster: std::env::var("PULSAR_B_CLUSTER").unwrap_or_else(|_| "cluster-b".into()),
            url: b_url,
            admin: env_path("PULSAR_B_ADMIN_URL"),
        },
    ]
}

/// A new topic in the namespace both clusters replicate, with `partitions` partitions in each.
pub async fn replicated_topic(regions: &[Region], partitions: u32) -> String {
    let namespace =
        std::env::var("FC_TEST_GEO_NAMESPACE").unwrap_or_else(|_| "geo/features".into());
    let topic = format!("persistent://{namespace}/{}", unique("geo"));
    // Pulsar 4 creates the partitioned topic in the other clusters of the namespace too
    // (409 there when it did so first).
    for region in regions {
        let response = feature_connector::tls::http_client()
            .put(admin_url_at(&region.admin, &topic, "partitions"))
            .header("content-type", "application/json")
            .body(partitions.to_string())
            .send()
            .await
            .expect("create the partitioned topic");
        assert!(
            response.status().is_success() || response.status().as_u16() == 409,
            "create the partitioned topic in {}: {}",
            region.cluster,
            response.status()
        );
    }
    topic
}

/// `{admin}/admin/v2/persistent/<topic>/<what>`.
pub fn admin_url_at(admin: &str, topic: &str, what: &str) -> String {
    let path = topic
        .strip_prefix("persistent://")
        .expect("persistent topic");
    format!("{admin}/admin/v2/persistent/{path}/{what}")
}

/// Backlog of `subscription` on the partitioned `topic` of the cluster at `admin`.
pub async fn backlog_at(admin: &str, topic: &str, subscription: &str) -> Option<u64> {
    let stats: Value = get_url(admin_url_at(admin, topic, "partitioned-stats"))
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    stats["subscriptions"][subscription]["msgBacklog"].as_u64()
}

/// A project of one region: its cluster (with `replication` lines), its Redis, the shared
/// table at `table_url`, Feast layout under `feast_project`.
pub fn region_project(
    region: &Region,
    redis: &str,
    topic: &str,
    replication: &str,
    table_url: &str,
    feast_project: &str,
) -> Project {
    let mut project = Project::new(redis);
    project.topic = topic.to_string();
    project.pulsar_section(
        &region.url,
        &region.admin,
        &format!(
            "  replication:\n    cluster: {}\n{replication}",
            region.cluster
        ),
    );
    project.pipeline(
        "user_features",
        &format!("online:\n  layout: feast\n  feast_project: {feast_project}"),
        &format!("offline:\n  url: {table_url}\n  rollover_interval: 1s"),
    );
    project
}

/// Feast's SDK reads `entities` users of `user_features` from the Redis at `host:port`:
/// per user, `(purchases_30d, event time ms)`.
pub fn feast_read(redis_host: &str, feast_project: &str, entities: u64) -> Vec<(i64, i64)> {
    let spec = json!({
        "views": [{"name": "user_features", "ttl_seconds": 0,
            "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
            "features": [{"name": "purchases_30d", "dtype": "Int64"}]}],
        "read": [{"view": "user_features",
            "entity_rows": (0..entities).map(|e| json!({"user_id": format!("user-{e}")})).collect::<Vec<_>>()}]
    });
    let repo = tempfile::tempdir().expect("repo dir");
    let read = crate::online::read_with_feast(
        &crate::online::feast_python(),
        repo.path(),
        (feast_project, &spec),
        &["--redis", redis_host],
        &[],
    );
    let users = &read["reads"][0];
    (0..entities as usize)
        .map(|row| {
            (
                users["rows"][row]["purchases_30d"].as_i64().unwrap_or(-1),
                users["event_time_us"][row].as_i64().unwrap_or(-1) / 1000,
            )
        })
        .collect()
}

/// Waits until `subscription` has no backlog in any of `regions`.
pub async fn wait_drained_everywhere(
    regions: &[Region],
    topic: &str,
    subscription: &str,
    timeout: Duration,
) {
    wait_until("every region to drain", timeout, || async {
        for region in regions {
            if backlog_at(&region.admin, topic, subscription).await != Some(0) {
                return false;
            }
        }
        true
    })
    .await;
}

/// Event time of event 0 in the geo tests.
pub const BASE: i64 = 1_792_000_000_000;
/// Entities of the geo tests (event i belongs to entity i % ENTITIES).
pub const ENTITIES: u64 = 1_000;

/// Runs `produce` on `project`'s cluster in a thread: events `start..start + count`,
/// shuffled, in batches of 100, with `extra` arguments.
pub fn produce(
    project: &Project,
    start: u64,
    count: u64,
    extra: &[&str],
) -> std::thread::JoinHandle<()> {
    let mut args: Vec<String> = [
        "--start",
        &start.to_string(),
        "--count",
        &count.to_string(),
        "--entities",
        &ENTITIES.to_string(),
        "--base-ms",
        &BASE.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    produce_with(project, args)
}

/// Runs `produce --pipeline user_features` on `project`'s cluster in a thread with `args`
/// (and `--batch 100 --shuffle`); the thread asserts it succeeded.
pub fn produce_with(project: &Project, mut args: Vec<String>) -> std::thread::JoinHandle<()> {
    let project_dir = project.path().to_path_buf();
    args.extend(["--batch", "100", "--shuffle"].map(String::from));
    std::thread::spawn(move || {
        let output = Command::new(env!("CARGO_BIN_EXE_feature-connector"))
            .args(["produce", "--pipeline", "user_features"])
            .args(&args)
            .arg("--root")
            .arg(&project_dir)
            .arg("--config")
            .arg(project_dir.join("config.yaml"))
            .output()
            .expect("run produce");
        assert!(
            output.status.success(),
            "produce: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    })
}

/// Two regions with a sidecar project each on one replicated topic: region A on the main
/// Redis, region B on a Redis of its own; one shared table on S3; Feast layout.
pub struct TwoRegions {
    pub regions: [Region; 2],
    pub topic: String,
    pub feast_project: String,
    pub table_url: String,
    pub a: Project,
    pub b: Project,
    /// Region B's Redis (`redis://127.0.0.1:<port>`), stopped on drop.
    pub redis_b_url: String,
    pub redis_b_port: u16,
    _redis_b: PrivateRedis,
}

impl TwoRegions {
    /// Both regions on a new topic of `partitions` partitions, each with the `replication`
    /// lines (below `cluster:`) in its service file.
    pub async fn new(partitions: u32, replication: &str) -> Self {
        let regions = regions();
        let topic = replicated_topic(&regions, partitions).await;
        let feast_project = unique("fcgeo").replace('-', "_");
        let table_url = s3_url(&unique("geo-table"));
        let a = region_project(
            &regions[0],
            &redis_url(),
            &topic,
            replication,
            &table_url,
            &feast_project,
        );
        let redis_b_port = free_port();
        let redis_b_url = format!("redis://127.0.0.1:{redis_b_port}");
        let redis_b = PrivateRedis::start(redis_b_port, a.path())
            .ready(&redis_b_url)
            .await;
        let b = region_project(
            &regions[1],
            &redis_b_url,
            &topic,
            replication,
            &table_url,
            &feast_project,
        );
        Self {
            regions,
            topic,
            feast_project,
            table_url,
            a,
            b,
            redis_b_url,
            redis_b_port,
            _redis_b: redis_b,
        }
    }

    /// The shared table holds `total` rows, each (user, event time) once (read by the Python
    /// `deltalake` package).
    pub fn assert_table_holds_once(&self, total: u64) {
        let table = format!("{}/user_features", self.table_url);
        let read = crate::offline::read_with("deltalake", &table);
        assert_eq!(read["rows"], json!(total), "rows in the table: {read}");
        assert_eq!(
            read["distinct_keys"],
            json!(total),
            "distinct (user, event time): {read}"
        );
    }

    /// `host:port` of each region's Redis, for Feast's SDK.
    pub fn redis_hosts(&self) -> [String; 2] {
        let a = redis_url()
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_string();
        [a, format!("127.0.0.1:{}", self.redis_b_port)]
    }
}

/// [`assert_quiet`] for a sidecar against cluster-b, except pulsar-rs's retries of a subscribe
/// the broker answered `ServiceNotReady`: with its transaction coordinator on (for the
/// transaction-marker tests), cluster-b's recovery of a new topic's transaction buffer can
/// time out on a busy 2-core box (its log: "Transaction buffer failed to recover snapshot!"),
/// and it then closes the topic; the consumer retries, which the log reports at WARN.
pub fn assert_quiet_but_broker_retries(what: &str, log: &str) {
    let rest: Vec<&str> = log
        .lines()
        .filter(|line| {
            !(line.contains("pulsar::retry_op")
                && (line.contains("ServiceNotReady") || line.contains("Retry #")))
        })
        .collect();
    assert_quiet(what, &rest.join("\n"));
}
