//! `feature-connector offline training-set`: a pipeline's aggregated features for each row
//! of an entity file, point in time, from its Delta table; or the same as SQL.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use arrow::datatypes::DataType;
use clap::Args;

use super::{ConfigArgs, EXIT_CONFIG};
use crate::delta::Table;
use crate::training::spine::Spine;
use crate::training::sql::{training_sql, Dialect, SqlSource};
use crate::training::{training_set, write_parquet};

/// Options of `offline training-set`.
#[derive(Debug, Args)]
pub struct TrainingSetArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Pipeline whose aggregations to compute.
    #[arg(long)]
    pipeline: String,
    /// Entity file: Parquet, or CSV with a header; the pipeline's join keys and a timestamp.
    #[arg(long)]
    entities: PathBuf,
    /// The entity file's timestamp column: epoch ms or a timestamp type.
    #[arg(long, default_value = "event_timestamp")]
    timestamp_column: String,
    /// Where to write the training set (Parquet).
    #[arg(long, required_unless_present = "sql")]
    output: Option<PathBuf>,
    /// Print the same computation as SQL for this engine instead of running it.
    #[arg(long, value_enum)]
    sql: Option<Dialect>,
}

/// Runs `offline training-set`.
pub async fn training_set_command(args: TrainingSetArgs) -> ExitCode {
    let (service, pipeline) = match args.config.load_pipeline(&args.pipeline) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let Some(source) = pipeline.event_source() else {
        eprintln!("error: pipeline `{}` has no aggregations", pipeline.name);
        return ExitCode::from(EXIT_CONFIG);
    };
    let spine = match Spine::read(
        &args.entities,
        &pipeline.entity_keys,
        &args.timestamp_column,
    ) {
        Ok(spine) => spine,
        Err(e) => {
            eprintln!("error: entity file {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let location = match service.offline_table(&pipeline, args.config.root()) {
        Ok(location) => location,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Some(dialect) = args.sql {
        let types = crate::schema::arrow_schema_of_reader(&pipeline.schema).unwrap_or_default();
        let is_timestamp = |t: Option<&DataType>| matches!(t, Some(DataType::Timestamp(_, _)));
        let event_type = types
            .iter()
            .find(|(n, _)| *n == pipeline.event_time)
            .map(|(_, t)| t);
        let spine_type = spine
            .rows
            .schema()
            .field_with_name(&args.timestamp_column)
            .ok()
            .map(|f| f.data_type().clone());
        let entities = args.entities.to_string_lossy();
        let url = location.url.to_string();
        print!(
            "{}",
            training_sql(
                dialect,
                &pipeline.aggregations,
                &SqlSource {
                    keys: &pipeline.entity_keys,
                    event_time: (&pipeline.event_time, is_timestamp(event_type)),
                    table_url: url.trim_end_matches('/'),
                    spine: (
                        &entities,
                        &args.timestamp_column,
                        is_timestamp(spine_type.as_ref())
                    ),
                    spine_is_csv: args
                        .entities
                        .extension()
                        .is_some_and(|e| e.eq_ignore_ascii_case("csv")),
                },
            )
        );
        return ExitCode::SUCCESS;
    }
    let Some(output) = args.output else {
        eprintln!("error: --output is required");
        return ExitCode::from(EXIT_CONFIG);
    };
    let started = Instant::now();
    let table = match Table::open_existing(location).await {
        Ok(table) => table,
        Err(e) => {
            eprintln!("error: offline table: {e}");
            return ExitCode::FAILURE;
        }
    };
    let set = match training_set(&table, &source, spine).await {
        Ok(set) => set,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = write_parquet(&output, &set.rows) {
        eprintln!("error: writing {}: {e}", output.display());
        return ExitCode::FAILURE;
    }
    println!(
        "{}: {} rows of {} entities in {:.1} s; read {} of {} files ({} rows), {} events of those entities",
        output.display(),
        set.rows.num_rows(),
        set.entities,
        started.elapsed().as_secs_f64(),
        set.read.files_read,
        set.read.files_read + set.read.files_skipped,
        set.read.rows_read,
        set.events
    );
    ExitCode::SUCCESS
}
