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
