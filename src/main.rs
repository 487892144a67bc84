//! The `feature-connector` binary; everything lives in the library.

fn main() -> std::process::ExitCode {
    feature_connector::cli::main()
}
