//! `pulsar.auth` in the service file: which credentials the connector presents, and the
//! checks `validate` and `run` make before anything connects.

use std::path::Path;

use serde::Deserialize;

use crate::yaml::{issue_at, ConfigIssue, Spanned};

/// The kinds of credentials, with their service-file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthKind {
    /// No credentials: the broker must allow anonymous clients.
    None,
    /// A JWT, from the file or the environment.
    Token,
    /// OAuth2 client credentials: the connector fetches and refreshes access tokens.
    OAuth2,
    /// A TLS client certificate (Pulsar's `AuthenticationTls`).
    Tls,
}

impl AuthKind {
    /// The service-file name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthKind::None => "none",
            AuthKind::Token => "token",
            AuthKind::OAuth2 => "oauth2",
            AuthKind::Tls => "tls",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [Self::None, Self::Token, Self::OAuth2, Self::Tls]
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }
}

/// `pulsar.auth`: one flat section whose `type` picks the keys that apply, so the embedded
/// default file can name every key from the environment and leave the unused ones empty.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `token`, `oauth2`, `tls` or `none`; empty: the kind whose keys are set (none set:
    /// `token` when `pulsar.token`/`token_file` are, else anonymous).
    #[serde(default, rename = "type")]
    pub kind: Option<Spanned<String>>,
    /// type `token`: the JWT itself (usually `${PULSAR_TOKEN}`).
    #[serde(default)]
    pub token: Option<Spanned<String>>,
    /// type `token`: a file holding the JWT (a mounted Secret).
    #[serde(default)]
    pub token_file: Option<Spanned<String>>,
    /// type `oauth2`: the issuer; its token endpoint comes from
    /// `<issuer_url>/.well-known/openid-configuration`.
    #[serde(default)]
    pub issuer_url: Option<Spanned<String>>,
    /// type `oauth2`: the audience the access tokens are requested for (the broker's).
    #[serde(default)]
    pub audience: Option<Spanned<String>>,
    /// type `oauth2`: scope to request, optional.
    #[serde(default)]
    pub scope: Option<Spanned<String>>,
    /// type `oauth2`: JSON file `{"client_id": …, "client_secret": …}` (a mounted Secret).
    #[serde(default)]
    pub credentials_file: Option<Spanned<String>>,
    /// type `tls`: PEM file of the client certificate (chain).
    #[serde(default)]
    pub cert_file: Option<Spanned<String>>,
    /// type `tls`: PEM file of the certificate's private key (PKCS#8).
    #[serde(default)]
    pub key_file: Option<Spanned<String>>,
}

/// A value as configured: unset and empty (an unset `${VAR:-}`) are the same.
pub fn value(field: &Option<Spanned<String>>) -> Option<&str> {
    field
        .as_ref()
        .map(|v| v.value.trim())
        .filter(|v| !v.is_empty())
}

/// Never prints the token.
impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("type", &value(&self.kind))
            .field("token", &value(&self.token).map(|_| "<redacted>"))
            .field("token_file", &value(&self.token_file))
            .field("issuer_url", &value(&self.issuer_url))
            .field("audience", &value(&self.audience))
            .field("scope", &value(&self.scope))
            .field("credentials_file", &value(&self.credentials_file))
            .field("cert_file", &value(&self.cert_file))
            .field("key_file", &value(&self.key_file))
            .finish()
    }
}

impl AuthConfig {
    fn keys(&self) -> [(&'static str, AuthKind, &Option<Spanned<String>>); 8] {
        [
            ("token", AuthKind::Token, &self.token),
            ("token_file", AuthKind::Token, &self.token_file),
            ("issuer_url", AuthKind::OAuth2, &self.issuer_url),
            ("audience", AuthKind::OAuth2, &self.audience),
            ("scope", AuthKind::OAuth2, &self.scope),
            ("credentials_file", AuthKind::OAuth2, &self.credentials_file),
            ("cert_file", AuthKind::Tls, &self.cert_file),
            ("key_file", AuthKind::Tls, &self.key_file),
        ]
    }

    /// The kind in effect: `type`, else the one kind whose keys are set, else `token` when
    /// the older `pulsar.token`/`token_file` keys are set. `None` when it cannot be told
    /// ([`AuthConfig::check`] says why).
    pub fn kind(&self, legacy_token: bool) -> Option<AuthKind> {
        if let Some(name) = value(&self.kind) {
            return AuthKind::parse(name);
        }
        let mut kinds: Vec<AuthKind> = self
            .keys()
            .into_iter()
            .filter(|(_, _, field)| value(field).is_some())
            .map(|(_, kind, _)| kind)
            .collect();
        if legacy_token {
            kinds.push(AuthKind::Token);
        }
        kinds.dedup();
        match kinds.as_slice() {
            [] => Some(AuthKind::None),
            [kind] => Some(*kind),
            _ => None,
        }
    }

    /// Problems with the section: an unknown type, keys of another type, missing keys, a
    /// type that needs a TLS URL. `legacy_token` says whether `pulsar.token`/`token_file`
    /// are set; `urls` are the binary and admin URLs.
    pub fn check(&self, file: &Path, legacy_token: bool, urls: (&str, &str)) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        // Issues about the section as a whole point at its `type` line, when written.
        let line = self
            .kind
            .as_ref()
            .and_then(|at| issue_at(file, at, "", "").line);
        let plain = |key: &str, message: String| ConfigIssue {
            file: file.to_path_buf(),
            line,
            key: Some(format!("pulsar.auth.{key}")),
            message,
        };
        let Some(kind) = self.kind(legacy_token) else {
            let message = match (value(&self.kind), &self.kind) {
                (Some(name), Some(at)) => {
                    return vec![issue_at(
                        file,
                        at,
                        "pulsar.auth.type",
                        format!("unknown type `{name}`; write token, oauth2, tls or none"),
                    )]
                }
                _ => "keys of several kinds are set; write `type: token`, `oauth2` or `tls`",
            };
            return vec![plain("type", message.into())];
        };
        for (key, owner, field) in self.keys() {
            if let (Some(_), Some(at)) = (value(field), field) {
                if owner != kind {
                    issues.push(issue_at(
                        file,
                        at,
                        &format!("pulsar.auth.{key}"),
                        format!(
                            "belongs to type {}, but the type is {}",
                            owner.as_str(),
                            kind.as_str()
                        ),
                    ));
                }
            }
        }
        if legacy_token && kind != AuthKind::Token {
            issues.push(plain(
                "type",
                format!(
                    "pulsar.token / pulsar.token_file are set, but the type is {}; remove them",
                    kind.as_str()
                ),
            ));
        }
        let required: &[(&str, &Option<Spanned<String>>)] = match kind {
            AuthKind::OAuth2 => &[
                ("issuer_url", &self.issuer_url),
                ("audience", &self.audience),
                ("credentials_file", &self.credentials_file),
            ],
            AuthKind::Tls => &[("cert_file", &self.cert_file), ("key_file", &self.key_file)],
            AuthKind::Token if !legacy_token => {
                if value(&self.token).is_none() && value(&self.token_file).is_none() {
                    issues.push(plain(
                        "token",
                        "type token needs `token` or `token_file`".into(),
                    ));
                }
                &[]
            }
            AuthKind::Token | AuthKind::None => &[],
        };
        for (key, field) in required {
            if value(field).is_none() {
                issues.push(plain(key, format!("required for type {}", kind.as_str())));
            }
        }
        if let Some(issuer) = value(&self.issuer_url) {
            if url::Url::parse(issuer).is_err() {
                issues.push(plain("issuer_url", format!("`{issuer}` is not a URL")));
            }
        }
        let (url, admin_url) = urls;
        if kind == AuthKind::Tls && !url.starts_with("pulsar+ssl://") {
            issues.push(plain(
                "type",
                format!("a client certificate needs a pulsar+ssl:// url, not `{url}`"),
            ));
        }
        if kind == AuthKind::Tls && !admin_url.starts_with("https://") {
            issues.push(plain(
                "type",
                format!("a client certificate needs an https:// admin_url, not `{admin_url}`"),
            ));
        }
        issues
    }
}

#[cfg(test)]
mod tests {
    // `pulsar.auth` checks: what `validate` and `run` report before anything connects.

    use std::path::Path;

    use crate::pulsar::auth::{key_problem, AuthKind};
    use crate::pulsar::PulsarServiceConfig;

    fn parse(yaml: &str) -> PulsarServiceConfig {
        match crate::yaml::parse_yaml(Path::new("service.yaml"), yaml) {
            Ok(config) => config,
            Err(e) => panic!("{e:?}"),
        }
    }

    /// The problems of a `pulsar:` section as `key: message` lines (with `@line` when known).
    fn problems(yaml: &str) -> Vec<String> {
        parse(yaml)
            .check(Path::new("service.yaml"))
            .into_iter()
            .map(|i| {
                let at = i.line.map(|l| format!("@{l} ")).unwrap_or_default();
                format!("{at}{}: {}", i.key.unwrap_or_default(), i.message)
            })
            .collect()
    }

    const PLAIN: &str = "url: pulsar://b:6650\nadmin_url: http://b:8080\n";
    const TLS: &str = "url: pulsar+ssl://b:6651\nadmin_url: https://b:8443\n";

    #[test]
    fn no_auth_and_the_older_token_keys_keep_working() {
        assert_eq!(parse(PLAIN).auth_kind(), Some(AuthKind::None));
        let legacy = format!("{PLAIN}token: abc\n");
        assert_eq!(parse(&legacy).auth_kind(), Some(AuthKind::Token));
        assert!(problems(&legacy).is_empty());
        let under_auth = format!("{PLAIN}auth:\n  type: token\n  token_file: /run/t\n");
        assert_eq!(parse(&under_auth).auth_kind(), Some(AuthKind::Token));
        assert!(problems(&under_auth).is_empty());
    }

    #[test]
    fn the_type_is_taken_from_the_keys_when_not_written() {
        let oauth2 = format!(
            "{PLAIN}auth:\n  type: \"\"\n  issuer_url: https://i\n  audience: pulsar\n  credentials_file: /c.json\n  cert_file: \"\"\n"
        );
        assert_eq!(parse(&oauth2).auth_kind(), Some(AuthKind::OAuth2));
        assert!(problems(&oauth2).is_empty(), "{:?}", problems(&oauth2));
        let tls = format!("{TLS}auth:\n  cert_file: /c.pem\n  key_file: /k.pem\n");
        assert_eq!(parse(&tls).auth_kind(), Some(AuthKind::Tls));
        assert!(problems(&tls).is_empty());
    }

    #[test]
    fn mixed_missing_or_misplaced_keys_are_reported() {
        assert_eq!(
            problems(&format!("{PLAIN}auth:\n  audience: a\n  cert_file: /c\n")),
            ["pulsar.auth.type: keys of several kinds are set; write `type: token`, `oauth2` or `tls`"]
        );
        assert_eq!(
            problems(&format!(
                "{PLAIN}auth:\n  type: oauth2\n  issuer_url: https://i\n  key_file: /k\n"
            )),
            [
                "@6 pulsar.auth.key_file: belongs to type tls, but the type is oauth2",
                "@4 pulsar.auth.audience: required for type oauth2",
                "@4 pulsar.auth.credentials_file: required for type oauth2",
            ]
        );
        assert_eq!(
            problems(&format!("{PLAIN}auth:\n  type: kerberos\n")),
            ["@4 pulsar.auth.type: unknown type `kerberos`; write token, oauth2, tls or none"]
        );
        assert_eq!(
            problems(&format!("{PLAIN}token: t\nauth:\n  type: tls\n  cert_file: /c\n  key_file: /k\n")),
            [
                "@5 pulsar.auth.type: pulsar.token / pulsar.token_file are set, but the type is tls; remove them",
                "@5 pulsar.auth.type: a client certificate needs a pulsar+ssl:// url, not `pulsar://b:6650`",
                "@5 pulsar.auth.type: a client certificate needs an https:// admin_url, not `http://b:8080`",
            ]
        );
        assert_eq!(
            problems(&format!("{PLAIN}auth:\n  type: token\n")),
            ["@4 pulsar.auth.token: type token needs `token` or `token_file`"]
        );
    }

    #[test]
    fn the_embedded_default_names_every_key_and_configures_none_without_the_environment() {
        #[derive(serde::Deserialize)]
        struct Service {
            pulsar: PulsarServiceConfig,
        }
        let text = include_str!("../../../config/default.yaml");
        let config: Service = match crate::yaml::parse_yaml(Path::new("default.yaml"), text) {
            Ok(config) => config,
            Err(e) => panic!("{e:?}"),
        };
        assert_eq!(config.pulsar.auth_kind(), Some(AuthKind::None));
        assert!(config.pulsar.check(Path::new("default.yaml")).is_empty());
    }

    #[test]
    fn a_key_that_is_not_pkcs8_is_named_with_the_conversion() {
        assert_eq!(key_problem(b"-----BEGIN PRIVATE KEY-----\nMII\n"), None);
        let rsa = key_problem(b"-----BEGIN RSA PRIVATE KEY-----\nMII\n").unwrap_or_default();
        assert!(rsa.contains("openssl pkcs8 -topk8 -nocrypt"), "{rsa}");
        assert!(key_problem(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
            .is_some_and(|p| p.contains("encrypted")));
        assert_eq!(key_problem(b"nothing"), Some("no PEM private key found"));
    }

    #[test]
    fn debug_output_never_shows_a_token() {
        let config = parse(&format!("{PLAIN}token: s3cr3t\nauth:\n  token: t0k3n\n"));
        let printed = format!("{config:?}");
        assert!(
            !printed.contains("s3cr3t") && !printed.contains("t0k3n"),
            "{printed}"
        );
    }
}
