//! Feast's SDK against our `/get-online-features` and against `feast serve`, on requests the
//! servers refuse: Feast's client raises the class of `feast.errors` that our answer names
//! (Feast's error detail), as it does for `feast serve`'s typed refusals. The client's own
//! registry knows what the servers do not (a view, a feature), so the requests reach them.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::feast::read_with_feast;
use crate::common::*;
use crate::online::feast_python;

/// A `feast serve` of a test's own, in a process group of its own (it starts worker
/// processes), all of which are stopped when dropped.
struct FeastServe(Child);

impl FeastServe {
    /// Serves the Feast repo in `repo` on `port`.
    fn start(python: &str, repo: &Path, port: u16, log: PathBuf) -> Self {
        let feast = Path::new(python).with_file_name("feast");
        let child = Command::new(feast)
            .args(["serve", "-h", "127.0.0.1", "-p", &port.to_string()])
            .current_dir(repo)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("feast serve log"))
            .spawn()
            .expect("start feast serve");
        Self(child)
    }
}

impl Drop for FeastServe {
    fn drop(&mut self) {
        if let Ok(group) = i32::try_from(self.0.id()) {
            // SAFETY: signals the process group this test started (its leader is our child).
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
        let _ = self.0.wait();
    }
}

fn view(name: &str, features: &[&str]) -> Value {
    json!({
        "name": name,
        "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
        "features": features.iter().map(|f| json!({"name": f, "dtype": "Int64"})).collect::<Vec<_>>(),
    })
}

/// The class and message of the error each raw read raised, in order (`None`: no error).
fn errors(result: &Value) -> Vec<Option<(String, String)>> {
    result["reads"]
        .as_array()
        .expect("reads")
        .iter()
        .map(|read| {
            let error = &read["error"];
            (!error.is_null()).then(|| {
                (
                    format!(
                        "{}.{}",
                        error["module"].as_str().unwrap_or_default(),
                        error["class"].as_str().unwrap_or_default()
                    ),
                    error["message"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feast_sdk_raises_typed_errors_from_our_answers_as_from_feast_serve() {
    let python = feast_python();
    let project_name = unique("fcerr").replace('-', "_");
    let project = Project::new(&redis_url());
    project.pipeline(
        "errs",
        &format!("online:\n  layout: feast\n  feast_project: {project_name}"),
        "offline:\n  enabled: false",
    );
    let mut connector = project.start();
    let dir = tempfile::tempdir().expect("dir");

    // feast serve's own registry has what the connector serves: the view `errs`.
    let served = json!({"views": [view("errs", &["purchases_30d"])], "read": []});
    let redis = redis_url().trim_start_matches("redis://").to_string();
    read_with_feast(
        &python,
        &dir.path().join("served"),
        &project_name,
        &served,
        &["--redis", &redis],
    );
    let port = free_port();
    let _feast_serve = FeastServe::start(
        &python,
        &dir.path().join("served/repo"),
        port,
        dir.path().join("feast-serve.log"),
    );
    let feast_url = format!("http://127.0.0.1:{port}");
    let health = format!("{feast_url}/health");
    wait_until(
        "feast serve to answer",
        Duration::from_secs(120),
        || async {
            get_url(&health)
                .await
                .is_ok_and(|r| r.status().is_success())
        },
    )
    .await;

    // The client's registry knows more: a view `ghost` and a feature `extra` of `errs`.
    let rows = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|e| json!({"user_id": format!("user-{e}")}))
            .collect()
    };
    let client = json!({
        "views": [view("errs", &["purchases_30d", "extra"]), view("ghost", &["purchases_30d"])],
        "read": [
            {"raw_features": ["ghost:purchases_30d"], "entity_rows": rows(1)},
            {"raw_features": ["errs:extra"], "entity_rows": rows(1)},
            {"raw_features": ["errs:purchases_30d"], "entity_rows": [{"userid": "user-1"}]},
            {"raw_features": ["errs:purchases_30d"], "entity_rows": rows(1_001)},
            {"raw_features": ["errs:purchases_30d"], "entity_rows": rows(2)},
        ],
    });
    connector.assert_running();
    let ours = errors(&read_with_feast(
        &python,
        &dir.path().join("ours"),
        &project_name,
        &client,
        &["--remote", &project.serving_url("")],
    ));
    let theirs = errors(&read_with_feast(
        &python,
        &dir.path().join("theirs"),
        &project_name,
        &client,
        &["--remote", &feast_url],
    ));
    let class = |errors: &[Option<(String, String)>], i: usize| {
        errors[i].as_ref().map(|(class, _)| class.clone())
    };
    let message = |i: usize| ours[i].as_ref().map_or("", |(_, m)| m.as_str()).to_string();

    // An unknown feature view: the same typed error from both servers.
    assert_eq!(
        class(&ours, 0).as_deref(),
        Some("feast.errors.FeatureViewNotFoundException"),
        "{ours:?}"
    );
    assert_eq!(class(&theirs, 0), class(&ours, 0), "{theirs:?}");
    assert!(message(0).contains("ghost"), "{ours:?}");
    // An unknown feature and a missing join key: feast serve answers 500 without a Feast
    // error (its client ends in a RetryError); ours are typed and name the problem.
    assert_eq!(
        class(&ours, 1).as_deref(),
        Some("feast.errors.FeastObjectNotFoundException"),
        "{ours:?}"
    );
    assert!(message(1).contains("no feature `extra`"), "{ours:?}");
    assert_eq!(
        class(&ours, 2).as_deref(),
        Some("feast.errors.FeastError"),
        "{ours:?}"
    );
    assert!(message(2).contains("user_id"), "{ours:?}");
    for i in [1, 2] {
        assert!(
            class(&theirs, i).is_some_and(|c| !c.starts_with("feast.errors.")),
            "feast serve has no typed error for read {i}: {theirs:?}"
        );
    }
    // Too many entities: only ours has a limit, and its error names it.
    assert_eq!(
        class(&ours, 3).as_deref(),
        Some("feast.errors.FeastError"),
        "{ours:?}"
    );
    assert!(
        message(3).contains("at most 1000 (serving.max_entities_per_request)"),
        "{ours:?}"
    );
    assert_eq!(class(&theirs, 3), None, "{theirs:?}");
    // A good read succeeds on both.
    assert_eq!((class(&ours, 4), class(&theirs, 4)), (None, None));
    assert_eq!(connector.stop(), 0);
}
