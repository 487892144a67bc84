//! The training set as SQL for an engine that reads Delta tables: the same point-in-time
//! join, for DuckDB (its `delta` extension) and Spark SQL. Each aggregated feature is a
//! filtered aggregate over the entity's events published by the row's timestamp whose
//! event time its window covers there:
//!
//! ```text
//!     publish_time <= t
//!     AND event_time >= floor((t − window) / hop) · hop
//!     AND event_time <  floor(t / hop) · hop + hop
//! ```

use arrow::datatypes::DataType;

use crate::aggregate::{longest_hop_ms, longest_reach_ms, Aggregation, Function};
use crate::delta::PUBLISH_TIME_COLUMN;

/// Which engine the SQL is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    /// DuckDB with the `delta` extension (`delta_scan`).
    Duckdb,
    /// Spark SQL with Delta Lake (`delta.\`url\``).
    Spark,
}

/// What the SQL reads and how its times are typed.
pub struct SqlSource<'a> {
    /// The pipeline's join keys.
    pub keys: &'a [String],
    /// The table's event-time column and whether it is a timestamp (else epoch ms).
    pub event_time: (&'a str, bool),
    /// The table's URL.
    pub table_url: &'a str,
    /// The entity file, its timestamp column, and whether that is a timestamp (else ms).
    pub spine: (&'a str, &'a str, bool),
    /// Whether the entity file is CSV (else Parquet).
    pub spine_is_csv: bool,
}

fn millis(dialect: Dialect, column: &str, is_timestamp: bool) -> String {
    match (is_timestamp, dialect) {
        (false, _) => column.to_string(),
        (true, Dialect::Duckdb) => format!("epoch_ms({column})"),
        (true, Dialect::Spark) => format!("unix_millis({column})"),
    }
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The SQL computing the training set of `aggregations` over `source`.
pub fn training_sql(
    dialect: Dialect,
    aggregations: &[Aggregation],
    source: &SqlSource<'_>,
) -> String {
    let (spine_file, spine_time, spine_is_timestamp) = source.spine;
    let spine_read = match (dialect, source.spine_is_csv) {
        (Dialect::Duckdb, true) => format!("read_csv({})", quoted(spine_file)),
        (Dialect::Duckdb, false) => format!("read_parquet({})", quoted(spine_file)),
        (Dialect::Spark, true) => format!("csv.`{spine_file}`"),
        (Dialect::Spark, false) => format!("parquet.`{spine_file}`"),
    };
    let table_read = match dialect {
        Dialect::Duckdb => format!("delta_scan({})", quoted(source.table_url)),
        Dialect::Spark => format!("delta.`{}`", source.table_url),
    };
    let row_number = match dialect {
        Dialect::Duckdb => "row_number() OVER ()",
        Dialect::Spark => "monotonically_increasing_id()",
    };
    let (event_time, event_is_timestamp) = source.event_time;
    let mut columns: Vec<String> = source.keys.to_vec();
    for aggregation in aggregations {
        if let Some(c) = &aggregation.column {
            if !columns.contains(c) {
                columns.push(c.clone());
            }
        }
    }
    let event_ms = millis(dialect, event_time, event_is_timestamp);
    let publish_ms = millis(dialect, PUBLISH_TIME_COLUMN, true);
    let reach = longest_reach_ms(aggregations);
    let longest_hop = longest_hop_ms(aggregations);
    let mut features = Vec::new();
    for aggregation in aggregations {
        for (window, name) in aggregation
            .spec
            .windows()
            .iter()
            .zip(aggregation.feature_names())
        {
            let (length, hop) = (window.length_ms(), window.hop_ms());
            let covers = format!(
                "e.fc_et >= floor((s.fc_t - {length}) / {hop}) * {hop} AND e.fc_et < floor(s.fc_t / {hop}) * {hop} + {hop}"
            );
            let value = aggregation.column.as_deref().map(|c| format!("e.{c}"));
            let value = value.as_deref().unwrap_or("e.fc_et");
            let float = aggregation.output_type() == DataType::Float64;
            let zero = if float { "0.0" } else { "0" };
            let expression = match aggregation.spec.function() {
                Function::Count => format!("count({value}) FILTER (WHERE {covers})"),
                Function::Sum => format!("coalesce(sum({value}) FILTER (WHERE {covers}), {zero})"),
                Function::Avg => format!("avg({value}) FILTER (WHERE {covers})"),
                Function::Min => format!("min({value}) FILTER (WHERE {covers})"),
                Function::Max => format!("max({value}) FILTER (WHERE {covers})"),
                // The exact count: ours is an estimate of it, within the sketch's error.
                // (An engine's own sketch is another estimate, not ours.)
                Function::ApproxDistinct => {
                    format!("count(DISTINCT {value}) FILTER (WHERE {covers})")
                }
                Function::LastK(k) => match dialect {
                    Dialect::Duckdb => format!(
                        "coalesce(list({value} ORDER BY e.fc_et DESC, e.fc_pt DESC) FILTER (WHERE {covers} AND {value} IS NOT NULL), [])[1:{k}]"
                    ),
                    Dialect::Spark => format!(
                        "slice(transform(array_sort(collect_list(named_struct('t', -e.fc_et, 'p', -e.fc_pt, 'v', {value})) FILTER (WHERE {covers} AND {value} IS NOT NULL)), x -> x.v), 1, {k})"
                    ),
                },
            };
            features.push(format!("    {expression} AS {name}"));
        }
    }
    let key_join: Vec<String> = source
        .keys
        .iter()
        .map(|k| format!("e.{k} = s.{k}"))
        .collect();
    let spine_ms = millis(dialect, spine_time, spine_is_timestamp);
    format!(
        "-- Training set: each row of {spine_file} with its aggregated features as of `{spine_time}`.\n\
         WITH spine AS (\n  SELECT *, {row_number} AS fc_row, {spine_ms} AS fc_t FROM {spine_read}\n),\n\
         events AS (\n  SELECT {columns}, {event_ms} AS fc_et, coalesce({publish_ms}, {event_ms}) AS fc_pt\n  FROM {table_read}\n),\n\
         features AS (\n  SELECT s.fc_row,\n{features}\n  FROM spine s LEFT JOIN events e\n    ON {key_join}\n    AND e.fc_pt <= s.fc_t AND e.fc_et >= s.fc_t - {reach} AND e.fc_et < s.fc_t + {longest_hop}\n  GROUP BY s.fc_row\n)\n\
         SELECT spine.*, features.* FROM spine JOIN features ON spine.fc_row = features.fc_row\nORDER BY spine.fc_row;\n",
        columns = columns.join(", "),
        features = features.join(",\n"),
        key_join = key_join.join(" AND "),
    )
}
