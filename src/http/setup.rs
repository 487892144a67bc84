//! Checks of the serving section made before anything starts, where the pipelines are known:
//! feature services must name online views and features; a listener reachable from the
//! network must have its token (`run` refuses to start without one, `validate` warns, since
//! the token is usually only in the deployed environment).

use std::path::Path;

use crate::config::{ConfigIssue, ServingConfig};
use crate::sink::redis::OnlineView;

fn issue(file: &Path, key: &str, message: String) -> ConfigIssue {
    ConfigIssue {
        file: file.to_path_buf(),
        line: None,
        key: Some(key.to_string()),
        message,
    }
}

/// Feature service entries that name no online view, or a feature the view lacks.
pub fn feature_service_issues(
    file: &Path,
    serving: &ServingConfig,
    views: &[OnlineView],
) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    for (service, entries) in &serving.feature_services {
        let key = format!("serving.feature_services.{service}");
        if entries.is_empty() {
            issues.push(issue(file, &key, "names no features".into()));
        }
        for entry in entries {
            let (view_name, feature) = match entry.split_once(':') {
                Some((view, feature)) => (view, Some(feature)),
                None => (entry.as_str(), None),
            };
            let Some(view) = views.iter().find(|v| v.name == view_name) else {
                let known: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
                issues.push(issue(
                    file,
                    &key,
                    format!(
                        "`{entry}`: no online view `{view_name}` (online views: {})",
                        known.join(", ")
                    ),
                ));
                continue;
            };
            if let Some(feature) = feature {
                if view.feature_index(feature).is_err() {
                    issues.push(issue(
                        file,
                        &key,
                        format!("`{entry}`: view `{view_name}` has no feature `{feature}`"),
                    ));
                }
            }
        }
    }
    issues
}

/// The token every read must carry, read now; an error when it cannot be read, or when the
/// serving bind is reachable from the network and no token is configured.
pub fn serving_token(file: &Path, serving: &ServingConfig) -> Result<Option<String>, ConfigIssue> {
    let token = serving
        .token()
        .map_err(|e| issue(file, "serving.token_file", e.to_string()))?;
    if token.is_none() && !serving.bind.is_empty() && !serving.is_loopback() {
        return Err(issue(file, "serving.token", unguarded(serving)));
    }
    Ok(token)
}

/// For `validate`: the serving bind is reachable from the network and no token is set.
pub fn unguarded_warning(file: &Path, serving: &ServingConfig) -> Option<ConfigIssue> {
    (!serving.bind.is_empty() && !serving.is_loopback() && !serving.has_token_configured())
        .then(|| issue(file, "serving.bind", unguarded(serving)))
}

fn unguarded(serving: &ServingConfig) -> String {
    format!(
        "serving.bind {} is not a loopback address, so every feature value would be readable from the network without a token: set serving.token (FC_SERVING_TOKEN) or serving.token_file (FC_SERVING_TOKEN_FILE), or bind 127.0.0.1; `run` refuses to start until then",
        serving.bind
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving(yaml: &str) -> ServingConfig {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn a_network_bind_needs_a_token() {
        let file = Path::new("service.yaml");
        let open = serving("bind: 0.0.0.0:6566\n");
        let refused = serving_token(file, &open).unwrap_err();
        assert_eq!(refused.key.as_deref(), Some("serving.token"));
        assert!(refused.message.contains("0.0.0.0:6566"), "{refused}");
        assert!(unguarded_warning(file, &open).is_some());

        let guarded = serving("bind: 0.0.0.0:6566\ntoken: t0ken\n");
        assert_eq!(
            serving_token(file, &guarded).unwrap().as_deref(),
            Some("t0ken")
        );
        assert!(unguarded_warning(file, &guarded).is_none());

        for loopback in ["127.0.0.1:6566", "[::1]:6566", "localhost:6566", ""] {
            let local = serving(&format!("bind: \"{loopback}\"\n"));
            assert_eq!(serving_token(file, &local).unwrap(), None, "{loopback}");
            assert!(unguarded_warning(file, &local).is_none(), "{loopback}");
        }
        let host = serving("bind: feature-host:6566\n");
        assert!(serving_token(file, &host).is_err());

        let unreadable = serving("bind: 127.0.0.1:1\ntoken_file: /nonexistent/serving-token\n");
        let err = serving_token(file, &unreadable).unwrap_err();
        assert_eq!(err.key.as_deref(), Some("serving.token_file"));
    }
}
