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
#[path = "config_tests.rs"]
mod tests;
