//! Configuration and the command line without a running pipeline: `validate` and the deploy
//! files.

mod deploy;
mod validate;
