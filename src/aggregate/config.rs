//! An aggregation as a pipeline file declares it, and the checks that make it one the tiles
//! can keep: a known function, a column of a type it takes, windows that tile, feature names
//! that clash with nothing.

use std::collections::BTreeMap;
use std::path::Path;

use arrow::datatypes::DataType;
use serde::Deserialize;

use super::column::Kind;
use super::function::Function;
use super::tiles::AggregationSpec;
use super::window::Window;
use crate::yaml::recover::closest;
use crate::yaml::{issue_at, ConfigIssue, Spanned};

/// The function names a pipeline file may use.
const FUNCTIONS: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "last_k",
    "approx_distinct",
];

/// The largest `k` of `last_k`: its values are kept per hop in the entity's tiles.
pub const MAX_K: u32 = 100;

/// One entry of a pipeline's `aggregations:` list, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregationConfig {
    /// The features' common name: each window gives the feature `<name>_<window>`.
    pub name: Spanned<String>,
    /// `count`, `sum`, `avg`, `min`, `max` or `last_k`.
    pub function: Spanned<String>,
    /// The aggregated field of the schema; `count` without it counts events.
    #[serde(default)]
    pub column: Option<Spanned<String>>,
    /// How many values `last_k` keeps.
    #[serde(default)]
    pub k: Option<Spanned<u32>>,
    /// Window lengths (`1h`, `7d`, `30d`): 5 minutes to 366 days, whole hops.
    pub windows: Spanned<Vec<Spanned<String>>>,
}

/// An aggregation after its checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregation {
    /// Its name in the pipeline file.
    pub name: String,
    /// The aggregated field, if any.
    pub column: Option<String>,
    /// What the field holds.
    pub kind: Kind,
    /// What the tiles need.
    pub spec: AggregationSpec,
}

impl Aggregation {
    /// The feature name of each window, in the order written: `purchases_1h`.
    pub fn feature_names(&self) -> Vec<String> {
        self.spec
            .windows()
            .iter()
            .map(|w| format!("{}_{}", self.name, w.suffix()))
            .collect()
    }

    /// The Arrow type of its features' values: integers for counts and for sums, minimums
    /// and maximums of integers and for distinct values; floats for means and for those of
    /// floats; a list of the column's values for `last_k`.
    pub fn output_type(&self) -> DataType {
        let column = match self.kind {
            Kind::Float => DataType::Float64,
            Kind::Text => DataType::Utf8,
            Kind::Bool => DataType::Boolean,
            Kind::Int | Kind::Other => DataType::Int64,
        };
        match self.spec.function() {
            Function::Count | Function::ApproxDistinct => DataType::Int64,
            Function::Avg => DataType::Float64,
            Function::LastK(_) => DataType::new_list(column, true),
            Function::Sum | Function::Min | Function::Max => column,
        }
    }
}

/// What the checks compare the aggregations with.
pub struct Fields<'a> {
    /// Every field of the reader schema with its Arrow type.
    pub types: &'a [(String, DataType)],
    /// Names the pipeline already serves or uses: plain features, entity keys, event time.
    pub taken: &'a [String],
}

/// Checks `configs` (the `aggregations:` list of `file`) against the schema's fields.
/// Returns the aggregations that passed and an issue for each problem found.
pub fn check_aggregations(
    file: &Path,
    configs: &[AggregationConfig],
    fields: &Fields<'_>,
) -> (Vec<Aggregation>, Vec<ConfigIssue>) {
    let mut issues = Vec::new();
    let mut passed = Vec::new();
    // Every feature name in use, with what uses it.
    let mut names: BTreeMap<String, String> = fields
        .taken
        .iter()
        .map(|n| (n.clone(), format!("the field `{n}`")))
        .collect();
    for (i, config) in configs.iter().enumerate() {
        let at = |key: &str| format!("aggregations[{i}].{key}");
        let before = issues.len();
        let name = &config.name.value;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            issues.push(issue_at(
                file,
                &config.name,
                &at("name"),
                "use lower-case letters, digits and `_` only",
            ));
        }
        let function = function_of(file, config, &at, &mut issues);
        let kind = column_check(file, config, function, fields, &at, &mut issues);
        let windows = windows_of(file, config, &at, &mut issues);
        if issues.len() > before {
            continue;
        }
        let (Some(function), Some(kind)) = (function, kind) else {
            continue;
        };
        let aggregation = Aggregation {
            name: name.clone(),
            column: config.column.as_ref().map(|c| c.value.clone()),
            kind,
            spec: AggregationSpec::new(function, kind == Kind::Float, windows),
        };
        let mut clashes = false;
        for feature in aggregation.feature_names() {
            if let Some(user) = names.get(&feature) {
                issues.push(issue_at(
                    file,
                    &config.name,
                    &at("name"),
                    format!("its feature `{feature}` has the name of {user}"),
                ));
                clashes = true;
            } else {
                names.insert(feature, format!("aggregation `{name}`"));
            }
        }
        if !clashes {
            passed.push(aggregation);
        }
    }
    (passed, issues)
}

fn function_of(
    file: &Path,
    config: &AggregationConfig,
    at: &impl Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Option<Function> {
    let written = config.function.value.as_str();
    let function = match written {
        "count" => Function::Count,
        "sum" => Function::Sum,
        "avg" => Function::Avg,
        "min" => Function::Min,
        "max" => Function::Max,
        "approx_distinct" => Function::ApproxDistinct,
        "last_k" => {
            let Some(k) = &config.k else {
                issues.push(issue_at(
                    file,
                    &config.function,
                    &at("k"),
                    "last_k needs `k`, how many values it keeps (e.g. k: 5)",
                ));
                return None;
            };
            if !(1..=MAX_K).contains(&k.value) {
                issues.push(issue_at(file, k, &at("k"), format!("must be 1 to {MAX_K}")));
                return None;
            }
            Function::LastK(k.value as usize)
        }
        other => {
            let hint = closest(other, FUNCTIONS)
                .or_else(|| FUNCTIONS.iter().copied().find(|f| abbreviates(other, f)))
                .map(|c| format!("did you mean `{c}`? "))
                .unwrap_or_default();
            issues.push(issue_at(
                file,
                &config.function,
                &at("function"),
                format!(
                    "unknown function `{other}`; {hint}(one of {})",
                    FUNCTIONS.join(", ")
                ),
            ));
            return None;
        }
    };
    if let (Some(k), false) = (&config.k, matches!(function, Function::LastK(_))) {
        issues.push(issue_at(
            file,
            k,
            &at("k"),
            format!("`k` is for last_k only, not {written}"),
        ));
    }
    Some(function)
}

/// Checks the column against the function; `Some(its kind)` when it passed (a count
/// without a column counts as integers).
fn column_check(
    file: &Path,
    config: &AggregationConfig,
    function: Option<Function>,
    fields: &Fields<'_>,
    at: &impl Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Option<Kind> {
    let function = function?;
    let Some(column) = &config.column else {
        if function == Function::Count {
            return Some(Kind::Int);
        }
        issues.push(issue_at(
            file,
            &config.function,
            &at("column"),
            format!(
                "{} needs `column`, the field it aggregates",
                function.name()
            ),
        ));
        return None;
    };
    let Some((_, data_type)) = fields.types.iter().find(|(n, _)| *n == column.value) else {
        let known: Vec<&str> = fields.types.iter().map(|(n, _)| n.as_str()).collect();
        let hint = closest(&column.value, &known)
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        issues.push(issue_at(
            file,
            column,
            &at("column"),
            format!("the schema has no field `{}`{hint}", column.value),
        ));
        return None;
    };
    let kind = Kind::of(data_type);
    let takes = match function {
        Function::Count => kind != Kind::Other,
        Function::Sum | Function::Avg | Function::Min | Function::Max => {
            matches!(kind, Kind::Int | Kind::Float)
        }
        Function::LastK(_) | Function::ApproxDistinct => kind != Kind::Other,
    };
    if !takes {
        issues.push(issue_at(
            file,
            column,
            &at("column"),
            format!(
                "{} cannot take `{}` of type {data_type}{}",
                function.name(),
                column.value,
                match function {
                    Function::Count | Function::LastK(_) | Function::ApproxDistinct => {
                        " (numbers, strings and booleans only)"
                    }
                    _ => " (numbers only)",
                }
            ),
        ));
        return None;
    }
    Some(kind)
}

fn windows_of(
    file: &Path,
    config: &AggregationConfig,
    at: &impl Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<Window> {
    if config.windows.value.is_empty() {
        issues.push(issue_at(
            file,
            &config.windows,
            &at("windows"),
            "list at least one window (e.g. [1h, 1d])",
        ));
    }
    let mut windows: Vec<Window> = Vec::new();
    for (j, written) in config.windows.value.iter().enumerate() {
        let key = at(&format!("windows[{j}]"));
        let window = humantime::parse_duration(&written.value)
            .map_err(|e| {
                format!(
                    "`{}` is not a duration ({e}); write e.g. 1h, 7d",
                    written.value
                )
            })
            .and_then(|d| {
                Window::new(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                    .map_err(|e| e.to_string())
            });
        match window {
            Ok(w) if windows.contains(&w) => {
                issues.push(issue_at(
                    file,
                    written,
                    &key,
                    format!("{w} is listed twice"),
                ));
            }
            Ok(w) => windows.push(w),
            Err(message) => issues.push(issue_at(file, written, &key, message)),
        }
    }
    windows
}

/// `true` when `short` is `long` with letters left out (`cnt` for `count`).
fn abbreviates(short: &str, long: &str) -> bool {
    let mut rest = long.chars();
    !short.is_empty() && short.chars().all(|c| rest.any(|l| l == c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        aggregations: Vec<AggregationConfig>,
    }

    fn check(text: &str) -> (Vec<Aggregation>, Vec<String>) {
        let file = Path::new("p.yaml");
        let parsed: File = crate::yaml::parse_yaml(file, text).expect("parses");
        let types = [
            ("user_id".to_string(), DataType::Utf8),
            ("event_time".to_string(), DataType::Int64),
            ("amount_eur".to_string(), DataType::Float64),
            ("quantity".to_string(), DataType::Int32),
            ("item_id".to_string(), DataType::Utf8),
            ("tags".to_string(), DataType::Binary),
        ];
        let taken = [
            "user_id".into(),
            "event_time".into(),
            "amount_eur_1h".into(),
        ];
        let (passed, issues) = check_aggregations(
            file,
            &parsed.aggregations,
            &Fields {
                types: &types,
                taken: &taken,
            },
        );
        (passed, issues.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_good_list_gives_a_feature_per_window() {
        let (passed, issues) = check(
            "aggregations:\n\
             - {name: purchases, function: count, windows: [1h, 1d, 30d]}\n\
             - {name: amount, function: sum, column: amount_eur, windows: [1h, 7d]}\n\
             - {name: basket, function: avg, column: quantity, windows: [90m]}\n\
             - {name: last_items, function: last_k, k: 5, column: item_id, windows: [1d]}\n",
        );
        assert_eq!(issues, Vec::<String>::new());
        let names: Vec<String> = passed.iter().flat_map(Aggregation::feature_names).collect();
        assert_eq!(
            names,
            [
                "purchases_1h",
                "purchases_1d",
                "purchases_30d",
                "amount_1h",
                "amount_7d",
                "basket_90m",
                "last_items_1d"
            ]
        );
        assert!(passed[1].spec.float_column() && !passed[2].spec.float_column());
        assert_eq!(passed[3].spec.function(), Function::LastK(5));
    }

    #[test]
    fn every_problem_is_named_with_its_line_and_key() {
        let (passed, issues) = check(
            "aggregations:\n\
             - {name: a, function: cnt, windows: [1h]}\n\
             - {name: b, function: sum, column: item_id, windows: [1h]}\n\
             - {name: c, function: max, column: amout_eur, windows: [1h]}\n\
             - {name: d, function: count, windows: [2m, 1x, 1h, 60m, 12d 5h]}\n\
             - {name: e, function: last_k, column: item_id, windows: [1h]}\n\
             - {name: f, function: sum, k: 3, column: quantity, windows: [1h]}\n\
             - {name: amount_eur, function: count, windows: [1h]}\n\
             - {name: g, function: count, windows: []}\n\
             - {name: h, function: min, windows: [1h]}\n\
             - {name: i, function: count, column: tags, windows: [1h]}\n\
             - {name: Bad, function: count, windows: [1h]}\n\
             - {name: d, function: count, windows: [1d]}\n",
        );
        let expected = [
            "p.yaml:2: key `aggregations[0].function`: unknown function `cnt`; did you mean `count`? (one of count, sum, avg, min, max, last_k, approx_distinct)",
            "p.yaml:3: key `aggregations[1].column`: sum cannot take `item_id` of type Utf8 (numbers only)",
            "p.yaml:4: key `aggregations[2].column`: the schema has no field `amout_eur`; did you mean `amount_eur`?",
            "p.yaml:5: key `aggregations[3].windows[0]`: a window of 2m is shorter than its hop of 5m; the shortest window is 5m",
            "p.yaml:5: key `aggregations[3].windows[1]`: `1x` is not a duration (unknown time unit \"x\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)); write e.g. 1h, 7d",
            "p.yaml:5: key `aggregations[3].windows[3]`: 1h is listed twice",
            "p.yaml:5: key `aggregations[3].windows[4]`: a window of 293h is not a whole number of its 1d hops (e.g. 12d)",
            "p.yaml:6: key `aggregations[4].k`: last_k needs `k`, how many values it keeps (e.g. k: 5)",
            "p.yaml:7: key `aggregations[5].k`: `k` is for last_k only, not sum",
            "p.yaml:8: key `aggregations[6].name`: its feature `amount_eur_1h` has the name of the field `amount_eur_1h`",
            "p.yaml:9: key `aggregations[7].windows`: list at least one window (e.g. [1h, 1d])",
            "p.yaml:10: key `aggregations[8].column`: min needs `column`, the field it aggregates",
            "p.yaml:11: key `aggregations[9].column`: count cannot take `tags` of type Binary (numbers, strings and booleans only)",
            "p.yaml:12: key `aggregations[10].name`: use lower-case letters, digits and `_` only",
        ];
        assert_eq!(issues, expected);
        // `d` failed, so its name is free for the last one.
        assert_eq!(passed.len(), 1);
        assert_eq!(passed[0].feature_names(), ["d_1d"]);
    }

    #[test]
    fn two_aggregations_cannot_give_the_same_feature() {
        let (passed, issues) = check(
            "aggregations:\n\
             - {name: n, function: count, windows: [1h, 1d]}\n\
             - {name: n, function: sum, column: quantity, windows: [1d]}\n",
        );
        assert_eq!(
            issues,
            ["p.yaml:3: key `aggregations[1].name`: its feature `n_1d` has the name of aggregation `n`"]
        );
        assert_eq!(passed.len(), 1);
    }
}
