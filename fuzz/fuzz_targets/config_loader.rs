//! Any text as a pipeline file and as a service file: the loader must answer with a config
//! or with located issues, never panic.
#![no_main]
// A failing set-up or a broken promise panics on purpose: a panic is what the fuzzer reports.
#![allow(clippy::expect_used)]

use std::path::Path;
use std::sync::OnceLock;

use feature_connector::config::{load_pipelines, parse_yaml, PipelineFile, ServiceConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_yaml::<ServiceConfig>(Path::new("service.yaml"), text);
    let _ = parse_yaml::<PipelineFile>(Path::new("pipeline.yaml"), text);
    // The whole load (interpolation, checks against the schema) on a real project folder.
    static PROJECT: OnceLock<tempfile::TempDir> = OnceLock::new();
    let project = PROJECT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("connectors")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("schemas")).expect("mkdir");
        std::fs::write(
            dir.path().join("schemas/user_profile.avsc"),
            include_str!("../../schemas/user_profile.avsc"),
        )
        .expect("schema");
        dir
    });
    std::fs::write(project.path().join("connectors/p.yaml"), text).expect("write");
    if let Err(e) = load_pipelines(&project.path().join("connectors"), project.path()) {
        assert!(!e.issues.is_empty(), "an error names at least one issue");
    }
});
