//! The request plan and the answer's shape, without Redis.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::DataType;
use serde_json::{json, Value};

use super::json::feast_timestamp as timestamp;
use super::request::{plan, OnlineFeaturesRequest};
use super::response::build;
use crate::redis::LayoutKind;
use crate::serving::{
    feature_service_issues, CachedRow, FeatureView, Found, QueryError, ServingConfig,
};

fn view(name: &str, keys: &[(&str, DataType)], features: &[(&str, DataType)]) -> FeatureView {
    let own = |list: &[(&str, DataType)]| {
        list.iter()
            .map(|(n, t)| ((*n).to_string(), t.clone()))
            .collect()
    };
    FeatureView {
        name: name.into(),
        prefix: "fc".into(),
        keys: own(keys),
        features: own(features),
        layout: LayoutKind::Native,
        project: "p".into(),
        ttl: Some(Duration::from_secs(60)),
        tiles: None,
    }
}

fn views() -> Vec<FeatureView> {
    vec![
        view(
            "users",
            &[("user_id", DataType::Utf8)],
            &[("clicks", DataType::Int64), ("ctr", DataType::Float32)],
        ),
        view(
            "regions",
            &[("user_id", DataType::Int64), ("region", DataType::Utf8)],
            &[("visits", DataType::Int64), ("clicks", DataType::Int64)],
        ),
    ]
}

fn request(body: Value) -> OnlineFeaturesRequest {
    serde_json::from_value(body).unwrap()
}

fn lookup<'v>(
    views: &'v [FeatureView],
) -> impl Fn(&str) -> Result<&'v FeatureView, QueryError> + 'v {
    move |name| {
        views
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| QueryError::UnknownView(name.into()))
    }
}

fn status_of(body: Value, services: &BTreeMap<String, Vec<String>>, max: usize) -> u16 {
    let views = views();
    let request = request(body);
    match plan(&request, lookup(&views), services, max) {
        Ok(_) => 200,
        Err(e) => e.status().as_u16(),
    }
}

#[test]
fn plans_group_features_per_view_and_type_the_keys() {
    let views = views();
    let request = request(json!({
        "features": ["users:ctr", "regions:visits", "users:clicks"],
        "entities": {"user_id": ["u1", "u2"], "region": ["eu", "us"], "extra": [1, 2]},
    }));
    // `user_id` is a string for `users` but an integer for `regions`.
    let err = plan(&request, lookup(&views), &BTreeMap::new(), 10).unwrap_err();
    assert_eq!(err.status().as_u16(), 400);
    assert!(
        err.to_string()
            .contains("join key `user_id` of view `regions` takes an integer"),
        "{err}"
    );

    let request = request_with_users();
    let planned = plan(&request, lookup(&views), &BTreeMap::new(), 10).unwrap();
    assert_eq!(planned.rows, 2);
    let names: Vec<&str> = planned.key_columns.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["user_id"], "join keys only, extra columns dropped");
    assert_eq!(planned.views.len(), 1);
    assert_eq!(planned.views[0].features, [1, 0]);
    assert_eq!(
        planned.views[0].entities,
        [vec!["u1".to_string()], vec!["u2".into()]]
    );
}

fn request_with_users() -> OnlineFeaturesRequest {
    request(json!({
        "features": ["users:ctr", "users:clicks"],
        "entities": {"user_id": ["u1", "u2"], "extra": [1, 2]},
    }))
}

#[test]
fn bad_requests_are_4xx() {
    let none = BTreeMap::new();
    let entities = json!({"user_id": ["u1"]});
    let cases = [
        (json!({"features": ["nope:x"], "entities": entities}), 404),
        (
            json!({"features": ["users:nope"], "entities": entities}),
            400,
        ),
        (json!({"features": ["users"], "entities": entities}), 400),
        (json!({"features": [], "entities": entities}), 400),
        (
            json!({"features": ["users:ctr", "users:ctr"], "entities": entities}),
            400,
        ),
        (
            json!({"features": ["users:clicks", "regions:clicks"],
                "entities": {"user_id": [1], "region": ["eu"]}}),
            400,
        ),
        (
            json!({"features": ["users:ctr"], "entities": {"user_id": [7]}}),
            400,
        ),
        (
            json!({"features": ["users:ctr"], "entities": {"user_id": [null]}}),
            400,
        ),
        (
            json!({"features": ["regions:visits"], "entities": {"user_id": [1]}}),
            400,
        ),
        (
            json!({"features": ["regions:visits"],
                "entities": {"user_id": [1, 2], "region": ["eu"]}}),
            400,
        ),
        (
            json!({"features": ["users:ctr"], "entities": {"user_id": ["a", "b", "c"]}}),
            413,
        ),
        (
            json!({"feature_service": "nope", "entities": entities}),
            404,
        ),
    ];
    for (body, status) in cases {
        assert_eq!(status_of(body.clone(), &none, 2), status, "{body}");
    }
    let full = json!({"features": ["users:clicks", "regions:clicks"], "full_feature_names": true,
                      "entities": {"user_id": ["u1"], "region": ["eu"]}});
    // Full names tell the two `clicks` apart; but `user_id` is a string here and regions
    // wants an integer.
    assert_eq!(status_of(full, &none, 2), 400);
    let big = json!({"features": ["regions:visits"], "entities": {"user_id": [2_147_483_648_i64], "region": ["eu"]}});
    assert_eq!(status_of(big, &none, 2), 200, "Int64 keys take any i64");
}

#[test]
fn feature_services_expand_whole_views() {
    let services = BTreeMap::from([(
        "ranking".to_string(),
        vec!["users".to_string(), "regions:visits".to_string()],
    )]);
    let views = views();
    let request = request(
        json!({"feature_service": "ranking", "features": ["ignored:x"],
                                 "entities": {"user_id": [5], "region": ["eu"]}}),
    );
    // users is keyed by a string user_id: 400, but the service itself resolved.
    let err = plan(&request, lookup(&views), &services, 10).unwrap_err();
    assert!(err.to_string().contains("view `users`"), "{err}");

    let mut config = ServingConfig {
        feature_services: services,
        ..ServingConfig::default()
    };
    config
        .feature_services
        .insert("broken".into(), vec!["users:nope".into(), "ghost".into()]);
    let issues = feature_service_issues(std::path::Path::new("s.yaml"), &config, &views);
    let messages: Vec<String> = issues.iter().map(ToString::to_string).collect();
    assert_eq!(issues.len(), 2, "{messages:?}");
    assert!(
        messages[0].contains("serving.feature_services.broken"),
        "{messages:?}"
    );
}

/// Per row: its event time and the stored (clicks, ctr) of the view `users`.
type Stored = (Option<i64>, [Option<&'static [u8]>; 2]);

/// The rows the answer tests read: fresh, stale (past the view's 60 s), missing, and one
/// whose clicks are null and whose ctr is `last_ctr`.
fn stored_rows(now: i64, last_ctr: &'static [u8]) -> [Stored; 4] {
    [
        (Some(now - 1_500), [Some(b"3"), Some(b"0.1")]),
        (Some(now - 61_000), [Some(b"4"), Some(b"NaN")]),
        (None, [None, None]),
        (Some(now), [None, Some(last_ctr)]),
    ]
}

/// `stored` as Redis replies to a lookup asking the features `asked` (indices into
/// (clicks, ctr)), in that order.
fn replied(stored: &[Stored], asked: [usize; 2]) -> Vec<Found> {
    stored
        .iter()
        .map(|(time, values)| {
            let values = asked.iter().map(|&f| values[f].map(<[u8]>::to_vec));
            Found::read(*time, values.collect())
        })
        .collect()
}

#[test]
fn answers_have_feasts_shape_and_statuses() {
    let views = views();
    let request = request(json!({
        "features": ["users:clicks", "users:ctr"],
        "entities": {"user_id": ["fresh", "stale", "missing", "nulls"]},
    }));
    let planned = plan(&request, lookup(&views), &BTreeMap::new(), 10).unwrap();
    let now = 1_800_000_000_000;
    // Asked as the view has them: (clicks, ctr).
    let found = vec![replied(&stored_rows(now, b"x"), [0, 1])];
    let answer: Value =
        serde_json::from_slice(&build(&planned, &found, now, true, true).to_json()).unwrap();
    assert_eq!(
        answer["metadata"],
        json!({"feature_names": ["user_id", "users__clicks", "users__ctr"],
               "feature_view_metadata": [{"name": "users"}]})
    );
    let results = &answer["results"];
    assert_eq!(
        results[0]["values"],
        json!(["fresh", "stale", "missing", "nulls"])
    );
    assert_eq!(
        results[0]["statuses"],
        json!(["PRESENT", "PRESENT", "PRESENT", "PRESENT"])
    );
    assert_eq!(results[0]["event_timestamps"][0], "1970-01-01T00:00:00Z");
    assert_eq!(results[1]["values"], json!([3, 4, null, null]));
    assert_eq!(
        results[1]["statuses"],
        json!(["PRESENT", "OUTSIDE_MAX_AGE", "NOT_FOUND", "NULL_VALUE"])
    );
    assert_eq!(
        results[1]["event_timestamps"],
        json!([
            timestamp(now - 1_500),
            timestamp(now - 61_000),
            "1970-01-01T00:00:00Z",
            timestamp(now)
        ])
    );
    assert_eq!(
        results[2]["values"],
        json!([f64::from(0.1f32), "NaN", null, "x"])
    );
    assert_eq!(
        results[2]["statuses"],
        json!(["PRESENT", "OUTSIDE_MAX_AGE", "NOT_FOUND", "PRESENT"])
    );
}

#[test]
fn cached_rows_answer_exactly_as_rows_read() {
    let views = views();
    // The features asked in another order than the view's (clicks, ctr).
    let request = request(json!({
        "features": ["users:ctr", "users:clicks"],
        "entities": {"user_id": ["fresh", "stale", "missing", "nulls"]},
    }));
    let planned = plan(&request, lookup(&views), &BTreeMap::new(), 10).unwrap();
    let now = 1_800_000_000_000;
    let stored = stored_rows(now, b"x \"quoted\"");
    let read = vec![replied(&stored, [1, 0])];
    let cached = vec![stored
        .iter()
        .map(|(time, values)| {
            let row = CachedRow::new(*time, values.iter().map(|v| v.map(<[u8]>::to_vec)), None);
            Found::cached(Arc::new(row))
        })
        .collect::<Vec<_>>()];
    let from_redis = build(&planned, &read, now, false, true).to_json();
    // Twice: the second answer copies the text the first one left in the rows.
    for _ in 0..2 {
        let from_cache = build(&planned, &cached, now, false, true).to_json();
        assert_eq!(
            String::from_utf8_lossy(&from_cache),
            String::from_utf8_lossy(&from_redis)
        );
    }
    let answer: Value = serde_json::from_slice(&from_redis).unwrap();
    assert_eq!(
        answer["results"][1]["values"],
        json!([f64::from(0.1f32), "NaN", null, "x \"quoted\""])
    );
    assert_eq!(
        answer["results"][2]["statuses"],
        json!(["PRESENT", "OUTSIDE_MAX_AGE", "NOT_FOUND", "NULL_VALUE"])
    );
    assert_eq!(
        answer["metadata"]["feature_view_metadata"],
        json!([{"name": "users"}])
    );
}

#[test]
fn timestamps_take_feasts_precision() {
    assert_eq!(timestamp(1_700_000_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(timestamp(1_700_000_000_120), "2023-11-14T22:13:20.120Z");
    assert_eq!(timestamp(-1), "1969-12-31T23:59:59.999Z");
}

#[test]
fn timestamps_are_what_strftime_wrote() {
    // The format the answers used before RFC 3339 was written directly.
    let strftime = |ms: i64| {
        let time = chrono::DateTime::from_timestamp_millis(ms).unwrap();
        if ms.rem_euclid(1000) == 0 {
            time.format("%Y-%m-%dT%H:%M:%SZ").to_string()
        } else {
            time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
        }
    };
    for ms in [
        0,
        1,
        999,
        1_000,
        -1,
        -1_000,
        -62_135_596_800_001,
        1_796_406_777_903,
        253_402_300_799_999,
        253_402_300_800_000,
        8_000_000_000_000_000,
        -8_000_000_000_000_000,
    ] {
        assert_eq!(timestamp(ms), strftime(ms), "{ms}");
    }
}
