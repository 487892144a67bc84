//! `${VAR}`, `${VAR:-default}` and `${VAR-default}` substitution, applied to the raw text
//! before YAML parsing so that hosts and secrets come from the environment and line numbers
//! stay exact. The defaults follow the shell's rules: `:-` applies when the variable is unset
//! or empty, `-` only when it is unset (so that an empty value can turn a setting off).

/// A variable that is referenced without a default and is not set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsetVariable {
    /// 1-based line of the reference.
    pub line: u32,
    /// Name of the variable.
    pub name: String,
}

/// Replaces every `${NAME}`, `${NAME:-default}` and `${NAME-default}` in `text` using
/// `lookup`.
///
/// `$${` escapes a literal `${`; whole-line `#` comments are left as they are. A substituted value never spans lines (newlines in values
/// are rejected), so YAML line numbers after substitution equal those of the file.
pub fn interpolate(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, Vec<UnsetVariable>> {
    let mut out = String::with_capacity(text.len());
    let mut unset = Vec::new();
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let line_no = u32::try_from(index + 1).unwrap_or(u32::MAX);
        if line.trim_start().starts_with('#') {
            // Comments may show the syntax itself; they are never substituted.
            out.push_str(line);
            continue;
        }
        let mut rest = line;
        while let Some(pos) = rest.find('$') {
            out.push_str(&rest[..pos]);
            let after = &rest[pos..];
            if let Some(escaped) = after.strip_prefix("$${") {
                out.push_str("${");
                rest = escaped;
                continue;
            }
            let Some(body_start) = after.strip_prefix("${") else {
                out.push('$');
                rest = &after[1..];
                continue;
            };
            let Some(end) = body_start.find('}') else {
                out.push_str(after);
                rest = "";
                break;
            };
            let body = &body_start[..end];
            let (name, default, empty_is_unset) = match body.split_once(":-") {
                Some((name, default)) => (name, Some(default), true),
                None => match body.split_once('-') {
                    Some((name, default)) => (name, Some(default), false),
                    None => (body, None, false),
                },
            };
            let value = lookup(name)
                .filter(|v| !v.contains('\n'))
                .filter(|v| !(empty_is_unset && v.is_empty()));
            match value {
                Some(value) => out.push_str(&value),
                None => match default {
                    Some(default) => out.push_str(default),
                    None => unset.push(UnsetVariable {
                        line: line_no,
                        name: name.to_string(),
                    }),
                },
            }
            rest = &body_start[end + 1..];
        }
        out.push_str(rest);
    }
    if unset.is_empty() {
        Ok(out)
    } else {
        Err(unset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("redis.internal".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn substitutes_set_variables_and_defaults() {
        let text = "url: redis://${HOST}:6379\nport: ${PORT:-8080}\nempty: '${EMPTY:-x}'\n";
        assert_eq!(
            interpolate(text, env).unwrap(),
            "url: redis://redis.internal:6379\nport: 8080\nempty: 'x'\n"
        );
    }

    #[test]
    fn a_default_after_a_dash_alone_keeps_an_empty_value() {
        let text = "bind: '${EMPTY-127.0.0.1:1}'\nport: '${PORT-8080}'\nset: ${HOST-x}\n";
        assert_eq!(
            interpolate(text, env).unwrap(),
            "bind: ''\nport: '8080'\nset: redis.internal\n"
        );
        assert_eq!(interpolate("a: '${EMPTY}'\n", env).unwrap(), "a: ''\n");
    }

    #[test]
    fn reports_every_unset_variable_with_its_line() {
        let err = interpolate("a: 1\nb: ${NOPE}\nc: ${ALSO_NOPE}\n", env).unwrap_err();
        assert_eq!(
            err,
            vec![
                UnsetVariable {
                    line: 2,
                    name: "NOPE".into()
                },
                UnsetVariable {
                    line: 3,
                    name: "ALSO_NOPE".into()
                },
            ]
        );
    }

    #[test]
    fn comment_lines_are_not_substituted() {
        assert_eq!(
            interpolate("# use ${VAR}\na: 1\n", env).unwrap(),
            "# use ${VAR}\na: 1\n"
        );
    }

    #[test]
    fn keeps_lone_dollars_and_escapes() {
        assert_eq!(
            interpolate("price: $5 and $${HOST}\n", env).unwrap(),
            "price: $5 and ${HOST}\n"
        );
    }
}
