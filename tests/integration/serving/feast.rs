//! Feast's SDK reads the same values through our `/get-online-features` (a Feast repo with
//! `online_store: {type: remote}` pointed at the serving listener, bearer token from the
//! environment) as it reads from Redis directly: both layouts, a single and a two-key entity,
//! every value type the layouts hold, missing entities, values past the pipeline's TTL
//! (`OUTSIDE_MAX_AGE`) and values Redis already expired (`NOT_FOUND`); with the read cache
//! off and on.

use std::path::Path;
use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::common::*;
use crate::online::feast_python;

/// Event times of the first events: months before now, so beyond a 1 h TTL.
const OLD_BASE: i64 = 1_789_000_000_000;
const EVENTS: u64 = 200;
const ENTITIES: u64 = 20;
/// Entities `0..FRESH` get one more event, with an event time of about now.
const FRESH: u64 = 10;
const TOKEN: &str = "it-serving-token-0123456789";

fn store_schema() -> &'static str {
    r#"{"type":"record","name":"StoreRegion","fields":[
        {"name":"store_id","type":"long"},
        {"name":"region","type":"string"},
        {"name":"event_time","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"visits","type":"long"},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"scores","type":{"type":"array","items":"double"}},
        {"name":"counts","type":{"type":"array","items":"long"}},
        {"name":"last_seen","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#
}

/// Runs tests/feast/read_online.py with `target` (`--redis H:P` or `--remote URL …`), the
/// serving token in `FC_IT_SERVING_TOKEN`.
pub(super) fn read_with_feast(
    python: &str,
    repo: &Path,
    project: &str,
    spec: &Value,
    target: &[&str],
) -> Value {
    crate::online::read_with_feast(
        python,
        repo,
        (project, spec),
        target,
        &[("FC_IT_SERVING_TOKEN", TOKEN)],
    )
}

/// The statuses a row of `features` should have: every feature `status`, except the
/// nullable `last_review_score` of events `i % 10 == 9`.
fn statuses(features: &[&str], status: &str, null_score: bool) -> Value {
    features
        .iter()
        .map(|f| {
            let s = if null_score && *f == "last_review_score" {
                "NULL_VALUE"
            } else {
                status
            };
            ((*f).to_string(), json!(s))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feast_sdk_reads_the_same_through_get_online_features_as_from_redis() {
    feast_sdk_reads_the_same(0).await;
}

/// The same through the read cache (`serving.cache_entities`): its rows, their TTL statuses
/// and the keys Redis expired answer exactly as Redis does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feast_sdk_reads_the_same_through_the_read_cache() {
    feast_sdk_reads_the_same(1000).await;
}

async fn feast_sdk_reads_the_same(cache_entities: usize) {
    let python = feast_python();
    let project_name = unique("fcsrv").replace('-', "_");
    let project = Project::new(&redis_url());
    let native_prefix = unique("srv");
    let flash_prefix = unique("flash");
    let feast = format!("  layout: feast\n  feast_project: {project_name}");
    project.pipeline(
        "user_features",
        &format!("online:\n{feast}\n  ttl: 1h"),
        "offline:\n  enabled: false",
    );
    project.pipeline(
        "user_features_native",
        &format!("online:\n  key_prefix: {native_prefix}\n  ttl: 1h"),
        "offline:\n  enabled: false",
    );
    project.pipeline(
        "user_flash",
        &format!("online:\n  key_prefix: {flash_prefix}\n  ttl: 2s"),
        "offline:\n  enabled: false",
    );
    let store_topic = format!("{}-stores", project.topic);
    project.schema_file("stores.avsc", store_schema());
    for (name, online) in [
        ("store_region", feast.clone()),
        (
            "store_region_native",
            format!("  key_prefix: {native_prefix}"),
        ),
    ] {
        std::fs::write(
            project.path().join(format!("connectors/{name}.yaml")),
            format!(
                "name: {name}\nsource:\n  topic: {store_topic}\n  subscription: {name}\nschema:\n  file: schemas/stores.avsc\nentity:\n  keys: [store_id, region]\n  event_time: event_time\nonline:\n{online}\noffline:\n  enabled: false\n"
            ),
        )
        .expect("pipeline");
    }
    project.serving_extra(
        &format!("  cache_entities: {cache_entities}\n  token: \"${{FC_IT_SERVING_TOKEN:-}}\"\n  feature_services:\n    ranking: [user_features, \"store_region:visits\", \"store_region:tags\"]"
        ),
    );

    let old = [
        "--count",
        &EVENTS.to_string(),
        "--entities",
        &ENTITIES.to_string(),
        "--base-ms",
        &OLD_BASE.to_string(),
        "--shuffle",
    ];
    project.produce_with("user_features", &old);
    project.produce_with("store_region", &old);
    // One more event for entities 0..FRESH, event time about ten seconds ago.
    let fresh_base = chrono::Utc::now().timestamp_millis() - 10_000 - EVENTS as i64;
    project.produce_with(
        "user_features",
        &[
            "--start",
            &EVENTS.to_string(),
            "--count",
            &FRESH.to_string(),
            "--entities",
            &ENTITIES.to_string(),
            "--base-ms",
            &fresh_base.to_string(),
        ],
    );
    let connector = project.start_with_env("run.log", &[("FC_IT_SERVING_TOKEN", TOKEN)]);
    wait_drained(
        &project.topic,
        &["user_features", "user_features_native", "user_flash"],
        Duration::from_secs(90),
    )
    .await;
    wait_drained(
        &store_topic,
        &["store_region", "store_region_native"],
        Duration::from_secs(90),
    )
    .await;
    // `user_flash`'s values are gone from Redis (2 s TTL) before anyone reads them.
    let redis = redis(&redis_url()).await;
    wait_until("user_flash keys to expire", Duration::from_secs(20), || {
        let mut redis = redis.clone();
        let prefix = flash_prefix.clone();
        async move {
            let keys: Vec<String> = redis.keys(format!("{prefix}:*")).await.unwrap_or_default();
            keys.is_empty()
        }
    })
    .await;

    let user_features = [
        "purchases_30d",
        "sessions_7d",
        "avg_basket_eur",
        "ctr_7d",
        "is_premium",
        "favourite_category",
        "embedding_id",
        "last_review_score",
    ];
    let user_dtypes = [
        "Int64", "Int32", "Float64", "Float32", "Bool", "String", "Bytes", "Float64",
    ];
    let store_features = ["visits", "tags", "scores", "counts", "last_seen"];
    let store_dtypes = [
        "Int64",
        "Array(String)",
        "Array(Float64)",
        "Array(Int64)",
        "UnixTimestamp",
    ];
    let fields = |names: &[&str], dtypes: &[&str]| -> Vec<Value> {
        names
            .iter()
            .zip(dtypes)
            .map(|(n, d)| json!({"name": n, "dtype": d}))
            .collect()
    };
    let user_view = |name: &str| {
        json!({"name": name, "ttl_seconds": 3600,
        "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
        "features": fields(&user_features, &user_dtypes)})
    };
    let store_view = |name: &str| {
        json!({"name": name, "ttl_seconds": 0,
        "entities": [{"name": "store", "join_key": "store_id", "dtype": "Int64"},
                     {"name": "region", "join_key": "region", "dtype": "String"}],
        "features": fields(&store_features, &store_dtypes)})
    };
    // Every entity, then one never written, then a store whose region does not match.
    let mut users: Vec<Value> = (0..ENTITIES)
        .map(|e| json!({"user_id": format!("user-{e}")}))
        .collect();
    users.push(json!({"user_id": "user-missing"}));
    let mut stores: Vec<Value> = (0..ENTITIES)
        .map(|e| json!({"store_id": e, "region": format!("region-{e}")}))
        .collect();
    stores.push(json!({"store_id": 999, "region": "region-999"}));
    stores.push(json!({"store_id": 3, "region": "region-4"}));
    let both: Vec<Value> = (0..ENTITIES + 1)
        .map(|e| json!({"user_id": format!("user-{e}"), "store_id": e, "region": format!("region-{e}")}))
        .collect();
    let direct_reads = vec![
        json!({"view": "user_features", "entity_rows": users}),
        json!({"view": "store_region", "entity_rows": stores}),
        json!({"feature_service": "ranking", "full_feature_names": true, "entity_rows": both}),
    ];
    let mut remote_reads = direct_reads.clone();
    remote_reads.push(json!({"view": "user_features_native", "entity_rows": users}));
    remote_reads.push(json!({"view": "store_region_native", "entity_rows": stores}));
    remote_reads.push(json!({"view": "user_flash", "entity_rows": users}));
    let spec = |reads: Vec<Value>| {
        json!({
            "views": [user_view("user_features"), user_view("user_features_native"), user_view("user_flash"),
                      store_view("store_region"), store_view("store_region_native")],
            "feature_services": [{"name": "ranking", "features": {"user_features": [], "store_region": ["visits", "tags"]}}],
            "read": reads,
        })
    };
    let dir = tempfile::tempdir().expect("dir");
    let redis_host = redis_url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string();
    let direct = read_with_feast(
        &python,
        &dir.path().join("direct"),
        &project_name,
        &spec(direct_reads),
        &["--redis", &redis_host],
    );
    let server = format!("http://127.0.0.1:{}", project.serving_port);
    let remote = read_with_feast(
        &python,
        &dir.path().join("remote"),
        &project_name,
        &spec(remote_reads),
        &["--remote", &server, "--token-env", "FC_IT_SERVING_TOKEN"],
    );

    if cache_entities > 0 {
        // The feature service's read asks again for entities the views' reads cached.
        let (_, metrics) = project.http_get("/metrics").await.expect("metrics");
        let hits = metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(r#"feature_connector_serving_cache_reads_total{outcome="hit"} "#)
            })
            .and_then(|n| n.parse::<u64>().ok());
        assert!(hits.is_some_and(|n| n >= ENTITIES), "{metrics}");
    }
    let (direct, remote) = (&direct["reads"], &remote["reads"]);
    // The same values, view by view; the native layout's views give the Feast layout's.
    for (ours, feasts) in [(0, 0), (1, 1), (2, 2), (3, 0), (4, 1)] {
        assert_eq!(
            remote[ours]["rows"], direct[feasts]["rows"],
            "remote read {ours} vs Redis read {feasts}"
        );
    }
    // …and they are the values written, not both empty.
    let fresh = EVENTS + 3;
    assert_eq!(remote[0]["rows"][3]["purchases_30d"], json!(fresh * 3));
    assert_eq!(
        remote[0]["rows"][3]["ctr_7d"],
        json!(f64::from(fresh as f32 / 4.0 + 5.0))
    );
    assert_eq!(
        remote[0]["rows"][15]["favourite_category"],
        json!("favourite_category-195")
    );
    assert_eq!(
        remote[1]["rows"][7]["tags"],
        json!(["tags-187", "tags-188", "tags-189"])
    );
    assert_eq!(remote[1]["rows"][7]["last_seen"], json!(1_700_000_187));
    assert_eq!(remote[2]["rows"][5]["store_region__visits"], json!(185 * 4));
    assert_eq!(
        remote[0]["rows"][ENTITIES as usize]["purchases_30d"],
        Value::Null
    );

    // Statuses say what happened (Feast's own Redis store says PRESENT for all of these).
    for read in [0, 3] {
        let rows = &remote[read]["statuses"];
        for e in 0..ENTITIES {
            let i = if e < FRESH {
                EVENTS + e
            } else {
                EVENTS - ENTITIES + e
            };
            let status = if e < FRESH {
                "PRESENT"
            } else {
                "OUTSIDE_MAX_AGE"
            };
            assert_eq!(
                rows[e as usize],
                statuses(&user_features, status, i % 10 == 9),
                "read {read}, user-{e}"
            );
        }
        assert_eq!(
            rows[ENTITIES as usize],
            statuses(&user_features, "NOT_FOUND", false),
            "read {read}"
        );
    }
    for read in [1, 4] {
        let rows = &remote[read]["statuses"];
        assert_eq!(rows[0], statuses(&store_features, "PRESENT", false));
        assert_eq!(
            rows[ENTITIES as usize],
            statuses(&store_features, "NOT_FOUND", false)
        );
        assert_eq!(
            rows[ENTITIES as usize + 1],
            statuses(&store_features, "NOT_FOUND", false)
        );
    }
    let flash = &remote[5];
    for e in 0..=ENTITIES as usize {
        assert_eq!(
            flash["statuses"][e],
            statuses(&user_features, "NOT_FOUND", false),
            "user_flash row {e}"
        );
        assert_eq!(flash["rows"][e]["purchases_30d"], Value::Null);
    }

    // The raw answer carries Feast's event timestamps (the remote store drops them).
    let answer: Value = feature_connector::tls::http_client()
        .post(project.serving_url("/get-online-features"))
        .bearer_auth(TOKEN)
        .json(&json!({"features": ["user_features:purchases_30d"], "entities": {"user_id": ["user-0", "nobody"]}}))
        .send()
        .await
        .expect("post")
        .json()
        .await
        .expect("json");
    assert_eq!(
        answer["metadata"]["feature_names"],
        json!(["user_id", "purchases_30d"])
    );
    let stamp = chrono::DateTime::from_timestamp_millis(fresh_base + EVENTS as i64).expect("time");
    let stamp = stamp.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let stamp = stamp.replace(".000Z", "Z");
    assert_eq!(
        answer["results"][1]["event_timestamps"],
        json!([stamp, "1970-01-01T00:00:00Z"])
    );
    assert_eq!(
        answer["results"][1]["statuses"],
        json!(["PRESENT", "NOT_FOUND"])
    );
    assert_eq!(connector.stop(), 0);
}
