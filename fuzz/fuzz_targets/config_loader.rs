//! Any text as a service file and as a pipeline file of a project: the loader must answer
//! with a config or with located issues, never panic.
#![no_main]
// A failing set-up or a broken promise panics on purpose: a panic is what the fuzzer reports.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use feature_connector::config::{load_pipeline_texts, parse_yaml, ServiceConfig};
use libfuzzer_sys::fuzz_target;

/// A project folder with the repository's schema, made once; the text under test is checked
/// as `connectors/p.yaml` of it without being written (a file per run made the target slow).
struct Project {
    dir: tempfile::TempDir,
    file: PathBuf,
}

fn project() -> &'static Project {
    static PROJECT: OnceLock<Project> = OnceLock::new();
    PROJECT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("schemas")).expect("mkdir");
        std::fs::write(
            dir.path().join("schemas/user_profile.avsc"),
            include_str!("../../schemas/user_profile.avsc"),
        )
        .expect("schema");
        let file = dir.path().join("connectors/p.yaml");
        Project { dir, file }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_yaml::<ServiceConfig>(Path::new("service.yaml"), text);
    // The whole load of a pipeline file (interpolation, parsing with repairs, checks against
    // the schema), as `load_pipelines` does it for the files it reads.
    let project = project();
    if let Err(e) = load_pipeline_texts([(project.file.as_path(), text)], project.dir.path()) {
        assert!(!e.issues.is_empty(), "an error names at least one issue");
    }
});
