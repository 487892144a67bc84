//! Training–serving consistency against the real stores: `audit` after replicas were
//! killed mid-stream, faults injected into Redis caught and named, the audit inside `run`.

mod audit;
