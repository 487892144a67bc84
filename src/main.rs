//! The `feature-connector` binary; everything lives in the library.

// The hot path allocates many small buffers per batch on several threads (decode, Redis
// commands, Parquet): jemalloc spent 15-20 % less connector CPU per event than glibc's
// malloc at a lower RSS peak (bench/results/history.md, profiling round 5). The `jemalloc`
// feature (on in the dist builds) turns it on.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings: freed pages go back to the system within a second, from a
/// background thread, and two arenas serve all threads (the runtime has one per core).
#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
// The symbol jemalloc reads its options from: a name it looks up, nothing else unsafe.
#[allow(unsafe_code)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:2\0";

fn main() -> std::process::ExitCode {
    feature_connector::cli::main()
}
