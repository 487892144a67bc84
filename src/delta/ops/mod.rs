//! The operator commands on a pipeline's table (`feature-connector offline …`): they run
//! beside the streaming sink, which commits alongside them unharmed.

mod compact;
mod upgrade;
mod vacuum;

pub use compact::{compact, partition_end_ms, plan_compaction, CompactionGroup};
pub use upgrade::{upgrade, UpgradeReport};
pub use vacuum::vacuum;
