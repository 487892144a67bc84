//! Windowed aggregations against the real services: events published to Pulsar, tiles
//! kept in Redis, values read through the serving listener and compared with values worked
//! out here from the events themselves (not with the crate's tiles).

mod serving;
