//! `feature-connector produce`: the load generator is a crate of its own
//! (`bench/loadgen`) so that it does not ship in the production library; this command runs
//! its binary, installed beside this one.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Args;

/// The name of the load generator's binary.
const LOADGEN: &str = "feature-connector-loadgen";

/// Everything after `produce`, handed over unchanged.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Arguments of `feature-connector-loadgen produce` (see its `--help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Runs `feature-connector-loadgen produce <args>` and returns its exit status.
pub fn produce(args: &ProduceArgs) -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(LOADGEN)))
        .filter(|path| path.is_file());
    let program = beside.map_or_else(|| OsString::from(LOADGEN), OsString::from);
    match std::process::Command::new(&program)
        .arg("produce")
        .args(&args.args)
        .status()
    {
        Ok(status) => match status.code() {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => ExitCode::FAILURE,
        },
        Err(e) => {
            eprintln!(
                "error: cannot run the load generator `{}`: {e} (build it with `cargo build -p feature-connector-loadgen`)",
                program.to_string_lossy()
            );
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LOADGEN;

    /// The Dockerfile's instructions, continuation lines joined.
    fn dockerfile_instructions() -> Vec<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile");
        let text = std::fs::read_to_string(path).expect("read the Dockerfile");
        text.replace("\\\n", " ")
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(str::to_owned)
            .collect()
    }

    /// The shipped image builds every binary `produce` needs with the connector's profile and
    /// installs them in one directory: `produce` looks for the load generator beside its own
    /// executable.
    #[test]
    fn the_image_ships_the_load_generator_beside_the_connector() {
        let instructions = dockerfile_instructions();
        let builds: Vec<&String> = instructions
            .iter()
            .filter(|line| line.starts_with("RUN ") && line.contains("cargo build"))
            .collect();
        assert_eq!(
            builds.len(),
            1,
            "one cargo build in the Dockerfile: {builds:?}"
        );
        let build: Vec<&str> = builds[0].split_whitespace().collect();
        assert!(
            build.windows(2).any(|w| w == ["--profile", "dist"]),
            "the image's build is the dist profile: {build:?}"
        );
        let mut installed_in = Vec::new();
        for bin in [env!("CARGO_PKG_NAME"), LOADGEN] {
            assert!(
                build.windows(2).any(|w| w == ["--bin", bin]),
                "the Dockerfile's cargo build builds `{bin}`: {build:?}"
            );
            let built = format!("/target/dist/{bin}");
            let copy = instructions
                .iter()
                .filter(|line| line.starts_with("COPY --from=build "))
                .find(|line| line.split_whitespace().any(|word| word.ends_with(&built)))
                .unwrap_or_else(|| panic!("no COPY --from=build of `{built}` in the Dockerfile"));
            let destination = copy.split_whitespace().last().unwrap_or_default();
            let dir = match destination.strip_suffix(&format!("/{bin}")) {
                Some(dir) => dir,
                None => destination.trim_end_matches('/'),
            };
            installed_in.push(dir.to_owned());
        }
        assert_eq!(
            installed_in[0], installed_in[1],
            "the connector and the load generator are installed in one directory"
        );
    }
}
