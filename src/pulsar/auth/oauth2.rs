//! OAuth2 client credentials (RFC 6749 §4.4) as Pulsar's Java client does them: the token
//! endpoint from the issuer's OpenID discovery document, `client_id`/`client_secret` in the
//! request body with `audience` (and `scope`), a JWT access token back.
//!
//! One [`OAuth2Session`] serves the binary protocol and the admin REST API, so both use the
//! same token and the issuer is asked once per token lifetime. A token is renewed once 80 %
//! of its lifetime has passed, whoever asks first: a (re)connect, the broker's
//! `AuthChallenge` when the token it holds expired, or an admin request.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::Mutex;

/// Why no access token could be had.
#[derive(Debug, thiserror::Error)]
pub enum OAuth2Error {
    /// The credentials file cannot be read or is not the expected JSON.
    #[error("cannot read the OAuth2 credentials file {path}: {detail}")]
    Credentials {
        /// The file.
        path: PathBuf,
        /// Why (never its contents).
        detail: String,
    },
    /// No answer from the issuer (DNS, connection refused, timeout).
    #[error("cannot reach the OAuth2 issuer at {url}: {source}")]
    Unreachable {
        /// The URL requested.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The issuer answered, but not with a discovery document naming a token endpoint.
    #[error("the OAuth2 issuer has no usable discovery document at {url}: {detail}")]
    Discovery {
        /// The discovery URL.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// The issuer refused the client: unknown client id or wrong secret.
    #[error("the OAuth2 issuer refused the client credentials ({error}: {description}); check client_id and client_secret in {credentials_file}")]
    ClientRefused {
        /// The OAuth2 error code.
        error: String,
        /// The issuer's description.
        description: String,
        /// The credentials file, to point at.
        credentials_file: String,
    },
    /// The issuer refused the audience this client asked for.
    #[error("the OAuth2 issuer refused audience `{audience}` for this client ({error}: {description}); check pulsar.auth.audience")]
    AudienceRefused {
        /// The audience requested.
        audience: String,
        /// The OAuth2 error code.
        error: String,
        /// The issuer's description.
        description: String,
    },
    /// Any other refusal of the token request (scope, grant type, …).
    #[error("the OAuth2 issuer refused the token request (HTTP {status}, {error}: {description}); check pulsar.auth.audience and scope")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The OAuth2 error code.
        error: String,
        /// The issuer's description.
        description: String,
    },
}

impl OAuth2Error {
    /// Whether asking again later may succeed (the issuer was not reachable or failing).
    pub fn is_transient(&self) -> bool {
        match self {
            OAuth2Error::Unreachable { .. } => true,
            OAuth2Error::Refused { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// `pulsar.auth` of type `oauth2`, checked.
#[derive(Debug, Clone)]
pub struct OAuth2Settings {
    /// The issuer URL.
    pub issuer_url: String,
    /// The audience to request.
    pub audience: String,
    /// The scope to request, if any.
    pub scope: Option<String>,
    /// The credentials file.
    pub credentials_file: PathBuf,
}

#[derive(Deserialize)]
struct ClientCredentials {
    client_id: String,
    client_secret: String,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

#[derive(Deserialize, Default)]
struct ErrorAnswer {
    #[serde(default)]
    error: String,
    #[serde(default)]
    error_description: String,
}

struct Cached {
    secret: String,
    renew_at: Instant,
    expires_at: Option<Instant>,
}

#[derive(Default)]
struct State {
    token_endpoint: Option<String>,
    token: Option<Cached>,
}

/// Access tokens for one client, fetched on demand and renewed before they expire.
pub struct OAuth2Session {
    settings: OAuth2Settings,
    http: reqwest::Client,
    state: Mutex<State>,
}

/// Never prints the token.
impl std::fmt::Debug for OAuth2Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth2Session")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The share of a token's lifetime after which it is renewed.
const RENEW_AT: f64 = 0.8;

impl OAuth2Session {
    /// A session asking the issuer through `http` (which carries the CA and a timeout).
    pub fn new(settings: OAuth2Settings, http: reqwest::Client) -> Self {
        Self {
            settings,
            http,
            state: Mutex::new(State::default()),
        }
    }

    /// The settings this session uses.
    pub fn settings(&self) -> &OAuth2Settings {
        &self.settings
    }

    /// A valid access token: the current one, or a new one once the current one is due.
    /// A failed renewal keeps using the current token while it has not expired.
    pub async fn token(&self) -> Result<String, OAuth2Error> {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if let Some(token) = &state.token {
            if now < token.renew_at {
                return Ok(token.secret.clone());
            }
        }
        match self.fetch(&mut state).await {
            Ok(token) => {
                let secret = token.secret.clone();
                state.token = Some(token);
                Ok(secret)
            }
            Err(e) => match &state.token {
                Some(token) if token.expires_at.is_none_or(|at| now < at) => {
                    tracing::warn!(error = %e, "cannot renew the OAuth2 access token; using the current one until it expires");
                    Ok(token.secret.clone())
                }
                _ => Err(e),
            },
        }
    }

    async fn fetch(&self, state: &mut State) -> Result<Cached, OAuth2Error> {
        let credentials = self.read_credentials()?;
        let endpoint = match &state.token_endpoint {
            Some(endpoint) => endpoint.clone(),
            None => {
                let endpoint = self.discover().await?;
                state.token_endpoint = Some(endpoint.clone());
                endpoint
            }
        };
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_id", credentials.client_id.as_str()),
            ("client_secret", credentials.client_secret.as_str()),
            ("audience", self.settings.audience.as_str()),
        ];
        if let Some(scope) = &self.settings.scope {
            form.push(("scope", scope.as_str()));
        }
        let asked = Instant::now();
        let response = self
            .http
            .post(&endpoint)
            .form(&form)
            .send()
            .await
            .map_err(|source| unreachable(&endpoint, source))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|source| unreachable(&endpoint, source))?;
        if !status.is_success() {
            return Err(self.refusal(status.as_u16(), &body));
        }
        let answer: TokenAnswer =
            serde_json::from_slice(&body).map_err(|e| OAuth2Error::Refused {
                status: status.as_u16(),
                error: "invalid_answer".into(),
                description: format!("the token endpoint's answer is not a token: {e}"),
            })?;
        let lifetime = answer.expires_in.map(Duration::from_secs);
        tracing::info!(
            issuer = %self.settings.issuer_url,
            audience = %self.settings.audience,
            expires_in_s = answer.expires_in,
            "OAuth2 access token obtained"
        );
        Ok(Cached {
            secret: answer.access_token,
            // Without a stated lifetime the token is kept until a refusal rebuilds the client.
            renew_at: lifetime.map_or(asked + Duration::from_secs(3600), |l| {
                asked + l.mul_f64(RENEW_AT)
            }),
            expires_at: lifetime.map(|l| asked + l),
        })
    }

    /// Re-read at each renewal, so a rotated Secret is picked up without a restart.
    fn read_credentials(&self) -> Result<ClientCredentials, OAuth2Error> {
        let path = &self.settings.credentials_file;
        let failed = |detail: String| OAuth2Error::Credentials {
            path: path.clone(),
            detail,
        };
        let text = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
        // Only where it went wrong: serde_json's own message may quote a value (a secret).
        serde_json::from_slice(&text).map_err(|e| {
            failed(format!(
                "expected {{\"client_id\": \"…\", \"client_secret\": \"…\"}} ({:?} error at line {}, column {})",
                e.classify(),
                e.line(),
                e.column()
            ))
        })
    }

    async fn discover(&self) -> Result<String, OAuth2Error> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.settings.issuer_url.trim_end_matches('/')
        );
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|source| unreachable(&url, source))?;
        let status = response.status();
        let detail = |detail: String| OAuth2Error::Discovery {
            url: url.clone(),
            detail,
        };
        if !status.is_success() {
            return Err(detail(format!("HTTP {status}")));
        }
        let document: serde_json::Value = response
            .json()
            .await
            .map_err(|e| detail(format!("not JSON: {e}")))?;
        document["token_endpoint"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| detail("no token_endpoint".into()))
    }

    fn refusal(&self, status: u16, body: &[u8]) -> OAuth2Error {
        let answer: ErrorAnswer = serde_json::from_slice(body).unwrap_or_default();
        let description: String = answer.error_description.chars().take(300).collect();
        match answer.error.as_str() {
            "invalid_client" | "unauthorized_client" => OAuth2Error::ClientRefused {
                error: answer.error,
                description,
                credentials_file: self.settings.credentials_file.display().to_string(),
            },
            _ if description.to_ascii_lowercase().contains("audience") => {
                OAuth2Error::AudienceRefused {
                    audience: self.settings.audience.clone(),
                    error: answer.error,
                    description,
                }
            }
            _ => OAuth2Error::Refused {
                status,
                error: answer.error,
                description,
            },
        }
    }
}

fn unreachable(url: &str, source: reqwest::Error) -> OAuth2Error {
    OAuth2Error::Unreachable {
        url: url.to_string(),
        source: source.without_url(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(credentials: &std::path::Path) -> OAuth2Session {
        OAuth2Session::new(
            OAuth2Settings {
                // Never asked: the credentials file is read first.
                issuer_url: "http://127.0.0.1:9".into(),
                audience: "pulsar".into(),
                scope: None,
                credentials_file: credentials.to_path_buf(),
            },
            crate::tls::http_client(),
        )
    }

    #[tokio::test]
    async fn a_malformed_credentials_file_is_reported_without_its_contents() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("credentials.json");
        std::fs::write(&file, r#"{"client_id": "c", "client_secret": 8675309}"#).expect("write");
        let error = session(&file)
            .token()
            .await
            .expect_err("a number is no secret");
        let message = error.to_string();
        assert!(
            matches!(error, OAuth2Error::Credentials { .. }),
            "{message}"
        );
        assert!(message.contains("line 1, column"), "{message}");
        assert!(
            !message.contains("8675309"),
            "the secret was printed: {message}"
        );

        let missing = session(&dir.path().join("nope.json")).token().await;
        assert!(matches!(missing, Err(OAuth2Error::Credentials { .. })));
    }
}
