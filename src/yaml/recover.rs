//! Every problem of a file in one run: serde stops at the first error, so after each one the
//! key at fault is repaired in a copy of the text and the copy parsed again, the way a
//! compiler goes on after an error. A misspelled key is renamed to the key it most likely
//! meant (so that a required key does not then read as missing); any other key at fault is
//! blanked out with its nested block, so its default applies. Lines keep their numbers.
//!
//! The wording of serde's messages is made a user's: Rust type names become the kind of
//! value expected, and an unknown key gets its closest known one as "did you mean".

use serde::de::DeserializeOwned;

/// At most this many problems are collected from one file.
const MAX_PROBLEMS: usize = 50;

/// One problem serde found, located in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line, when the parser knows it.
    pub line: Option<u32>,
    /// The key at fault, when it can be told.
    pub key: Option<String>,
    /// What is wrong, in a user's words.
    pub message: String,
}

/// Parses `text` into `T`, collecting every problem. The value is `Some` when the text
/// parsed, possibly only after its problems were repaired (for further checks of the rest);
/// the problems are empty only when the text parsed as it is.
pub fn parse_all<T: DeserializeOwned>(text: &str) -> (Option<T>, Vec<Problem>) {
    let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    let mut problems = Vec::new();
    let mut repaired_lines = Vec::new();
    // Without the parser's source snippets: the problems are worded from the bare error and
    // located by its line, so a snippet was cut out of the text and rendered for each parse
    // only to be dropped (a third of the time taken by files with many problems).
    let options = serde_saphyr::options! { with_snippet: false };
    loop {
        let current = lines.join("\n");
        let error = match serde_saphyr::from_str_with_options::<T>(&current, options.clone()) {
            Ok(value) => return (Some(value), problems),
            Err(e) => e,
        };
        let line = error
            .location()
            .and_then(|l| u32::try_from(l.line()).ok())
            .filter(|&l| l > 0);
        let raw = error.to_string();
        let key = quoted_field(&raw).or_else(|| line.and_then(|l| key_at_line(&current, l)));
        let described = describe(
            &error,
            line.and_then(|l| written_at(&current, l)).as_deref(),
        );
        // A key this loop removed or renamed reads as missing: that is the earlier problem.
        let artefact = described.missing
            && key
                .as_ref()
                .is_some_and(|k| repaired_lines.iter().any(|(_, r)| r == k));
        if !artefact {
            problems.push(Problem {
                line,
                key: key.clone(),
                message: described.message,
            });
        }
        if described.missing {
            return (None, problems);
        }
        let Some(at) = line else {
            return (None, problems);
        };
        let index = usize::try_from(at).unwrap_or(usize::MAX) - 1;
        if problems.len() >= MAX_PROBLEMS
            || index >= lines.len()
            || repaired_lines.iter().any(|(l, _)| *l == index)
        {
            return (None, problems);
        }
        repaired_lines.push((index, key.clone().unwrap_or_default()));
        match described.meant {
            Some(meant) => rename_key(&mut lines[index], &meant),
            None => blank_block(&mut lines, index),
        }
    }
}

/// Replaces the key of `line` (`  subscripton: x` → `  subscription: x`).
fn rename_key(line: &mut String, meant: &str) {
    let indent = line.len() - line.trim_start().len();
    let body = line[indent..].to_string();
    let dash = if body.starts_with("- ") { "- " } else { "" };
    if let Some((_, value)) = body[dash.len()..].split_once(':') {
        *line = format!("{}{dash}{meant}:{value}", &line[..indent]);
    }
}

/// Empties `lines[index]` and the lines nested under it (more indented, or blank).
fn blank_block(lines: &mut [String], index: usize) {
    let indent = |line: &str| line.len() - line.trim_start().len();
    let own = indent(&lines[index]);
    lines[index].clear();
    for line in lines.iter_mut().skip(index + 1) {
        if !line.trim().is_empty() && indent(line) <= own {
            break;
        }
        line.clear();
    }
}

/// The mapping key written on `line` of `text` (`  ttl: 5m` → `ttl`).
pub fn key_at_line(text: &str, line: u32) -> Option<String> {
    let raw = text
        .lines()
        .nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
    let trimmed = raw.trim_start().trim_start_matches("- ");
    let (key, _) = trimmed.split_once(':')?;
    let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
    (!key.is_empty() && !key.contains(' ')).then(|| key.to_string())
}

/// The first back-quoted name in a serde message (`unknown field `ttl_s`` → `ttl_s`).
fn quoted_field(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    if !(lower.contains("unknown field")
        || lower.contains("missing field")
        || lower.contains("duplicate field"))
    {
        return None;
    }
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}

/// The parser's first line without its own `error: line N column M:` prefix (the location
/// is printed apart).
pub fn first_line(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message).trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    if first.starts_with("line ") {
        if let Some((_, rest)) = first.split_once(": ") {
            return rest.to_string();
        }
    }
    first.to_string()
}

/// What a parse error says, in a user's words.
struct Described {
    message: String,
    /// For an unknown key: the known key it most likely meant.
    meant: Option<String>,
    /// A required key is missing: nothing on a line to repair.
    missing: bool,
}

/// `error` in a user's words; `written` is the value written on the error's line, if any.
fn describe(error: &serde_saphyr::Error, written: Option<&str>) -> Described {
    use serde_saphyr::Error as E;
    let plain = |message: String| Described {
        message,
        meant: None,
        missing: false,
    };
    let value = written.map_or_else(String::new, |v| format!("`{v}` "));
    match error.without_snippet() {
        E::SerdeUnknownField {
            field, expected, ..
        } => {
            let meant = closest(field, expected);
            let mut message = format!("unknown key `{field}`");
            if let Some(meant) = meant {
                message.push_str(&format!("; did you mean `{meant}`?"));
            }
            if !expected.is_empty() {
                message.push_str(&format!(" (keys here: {})", expected.join(", ")));
            }
            Described {
                message,
                meant: meant.map(str::to_string),
                missing: false,
            }
        }
        E::SerdeUnknownVariant {
            variant, expected, ..
        } => {
            let mut message = format!("`{variant}` is not one of the accepted values");
            if let Some(meant) = closest(variant, expected) {
                message.push_str(&format!("; did you mean `{meant}`?"));
            }
            message.push_str(&format!(" (accepted: {})", expected.join(", ")));
            plain(message)
        }
        E::SerdeMissingField { field, .. } => Described {
            message: format!("required key `{field}` is missing"),
            meant: None,
            missing: true,
        },
        E::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        }
        | E::SerdeInvalidType {
            unexpected,
            expected,
            ..
        } => {
            let got = unexpected
                .strip_prefix("string ")
                .or_else(|| unexpected.strip_prefix("integer "))
                .unwrap_or(unexpected)
                .trim_matches(|c| c == '"' || c == '`');
            plain(format!("`{got}` is not {}", kind_in_words(expected)))
        }
        E::InvalidScalar { ty, .. } => plain(format!("{value}is not {}", kind_in_words(ty))),
        E::NullIntoString { .. } => {
            plain("is empty: write a value here, or remove the key".to_string())
        }
        other => {
            let text = first_line(&other.to_string());
            let text = text.split("; use ").next().unwrap_or(&text).to_string();
            match text.strip_prefix("expected ") {
                Some(kind) => plain(format!("{value}is not {}", kind_in_words(kind))),
                None => plain(text),
            }
        }
    }
}

/// The kind of value a Rust type or a parser's expectation stands for, as a user writes it.
fn kind_in_words(expected: &str) -> String {
    const KINDS: [(&str, &str); 14] = [
        (
            "duration",
            "a duration: a number and a unit, e.g. 500ms, 30s, 5m, 2h, 7d or 1h 30m",
        ),
        ("nonzero", "a whole number, 1 or more"),
        ("usize", "a whole number, 0 or more"),
        ("u64", "a whole number, 0 or more"),
        ("u32", "a whole number, 0 or more"),
        ("u16", "a whole number from 0 to 65535"),
        ("u8", "a whole number from 0 to 255"),
        ("i64", "a whole number"),
        ("i32", "a whole number"),
        ("f64", "a number"),
        ("bool", "true or false"),
        ("sequence", "a list"),
        ("mapping", "a mapping (indented `key: value` lines)"),
        ("scalar", "a single value"),
    ];
    let lower = expected.to_ascii_lowercase();
    KINDS
        .iter()
        .find(|(rust, _)| lower.contains(rust))
        .map_or_else(|| expected.to_string(), |(_, words)| (*words).to_string())
}

/// The value written after the key on `line` of `text`, if any.
fn written_at(text: &str, line: u32) -> Option<String> {
    let raw = text
        .lines()
        .nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
    let (_, value) = raw.split_once(':')?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_string())
}

/// The known name closest to `unknown`, if it is close enough to be a likely misspelling.
pub fn closest<'a>(unknown: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = (unknown.chars().count() / 3).max(1);
    known
        .iter()
        .map(|&k| (edit_distance(unknown, k), k))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// Levenshtein distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Pipeline {
        name: String,
        source: Source,
        #[serde(default)]
        online: Option<Online>,
        #[serde(default)]
        offline: Option<Offline>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Source {
        topic: String,
        subscription: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Online {
        #[serde(default, with = "humantime_serde")]
        ttl: Option<Duration>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Offline {
        #[serde(default)]
        rollover_rows: usize,
    }

    #[test]
    fn every_problem_is_reported_and_the_rest_still_parses() {
        let text = "name: p\nsource:\n  topic: t\n  subscripton: s\nonline:\n  ttl: a week\noffline:\n  rollover_rows: -5\n";
        let (value, problems) = parse_all::<Pipeline>(text);
        let lines: Vec<Option<u32>> = problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, [Some(4), Some(6), Some(8)], "{problems:#?}");
        assert_eq!(problems[0].key.as_deref(), Some("subscripton"));
        assert!(
            problems[0].message.contains("did you mean `subscription`?"),
            "{problems:#?}"
        );
        assert_eq!(problems[1].key.as_deref(), Some("ttl"));
        assert!(problems[1].message.contains("7d"), "{problems:#?}");
        assert_eq!(problems[2].key.as_deref(), Some("rollover_rows"));
        assert!(
            problems[2].message.contains("a whole number, 0 or more"),
            "{problems:#?}"
        );
        for problem in &problems {
            for rust in ["Option<", "usize", "u64", "serde", "struct "] {
                assert!(!problem.message.contains(rust), "{problem:?}");
            }
        }
        let value = value.expect("the repaired text parses");
        assert_eq!(value.source.subscription, "s");
    }

    #[test]
    fn a_missing_required_key_is_one_problem() {
        let (value, problems) = parse_all::<Pipeline>("name: p\nsource:\n  topic: t\n");
        assert!(value.is_none());
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(
            problems[0].message.contains("`subscription` is missing"),
            "{problems:#?}"
        );
    }

    #[test]
    fn a_clean_file_has_no_problem() {
        let (value, problems) =
            parse_all::<Pipeline>("name: p\nsource:\n  topic: t\n  subscription: s\n");
        assert!(problems.is_empty());
        assert!(value.is_some());
    }

    #[test]
    fn an_unknown_key_far_from_every_known_one_gets_no_guess() {
        let (_, problems) =
            parse_all::<Pipeline>("name: p\nsource:\n  topic: t\n  subscription: s\ncolour: red\n");
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(
            !problems[0].message.contains("did you mean"),
            "{problems:#?}"
        );
        assert!(problems[0].message.contains("keys here: name, source"));
    }

    #[test]
    fn closest_names_a_likely_misspelling_only() {
        assert_eq!(
            closest("subscripton", &["topic", "subscription"]),
            Some("subscription")
        );
        assert_eq!(closest("colour", &["topic", "subscription"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
