//! The service file's `pulsar:` section: where the cluster is and how to log in, and the
//! clients (binary protocol credentials, admin REST) built from it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;

use pulsar::{OperationRetryOptions, Pulsar, TokioExecutor};

use super::auth::{
    key_problem, value, AuthConfig, AuthKind, ClientCertificate, Credentials, OAuth2Session,
    OAuth2Settings,
};
use super::PulsarError;
use crate::secret::non_empty;
use crate::yaml::ConfigIssue;

/// Where the Pulsar cluster is and how to log in (service file).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PulsarServiceConfig {
    /// Binary protocol URL, e.g. `pulsar://127.0.0.1:6650` or `pulsar+ssl://…:6651`.
    pub url: String,
    /// Admin REST URL, e.g. `http://127.0.0.1:8080` (schema registry, stats).
    pub admin_url: String,
    /// A JWT for token authentication (usually `${PULSAR_TOKEN}`); empty = none. The same as
    /// `auth.token`, kept from before `auth`.
    #[serde(default)]
    pub token: Option<String>,
    /// A file holding the JWT (e.g. a mounted Kubernetes Secret); read at each connect.
    #[serde(default)]
    pub token_file: Option<String>,
    /// PEM file of the CA that signed the broker's TLS certificate (`pulsar+ssl://`,
    /// `https://`); empty = the system roots.
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// How to log in: token, OAuth2 client credentials or a TLS client certificate.
    #[serde(default)]
    pub auth: AuthConfig,
    /// This sidecar's place in a geo-replicated namespace (one sidecar per region).
    #[serde(default)]
    pub replication: Option<super::ReplicationConfig>,
    /// The OAuth2 session, made once and shared by every clone of this config, so the
    /// binary protocol and the admin API use one token.
    #[serde(skip)]
    oauth2: Arc<OnceLock<Arc<OAuth2Session>>>,
}

/// Never prints the token.
impl std::fmt::Debug for PulsarServiceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PulsarServiceConfig")
            .field("url", &self.url)
            .field("admin_url", &self.admin_url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("auth", &self.auth)
            .field("replication", &self.replication)
            .finish()
    }
}

/// The service's Pulsar credentials or CA cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// A configured file cannot be read.
    #[error("cannot read pulsar.{key} {path}: {source}")]
    ReadFile {
        /// The config key naming the file.
        key: &'static str,
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token has characters an HTTP header cannot carry.
    #[error("the Pulsar token is not a valid HTTP header value")]
    BadToken(#[source] reqwest::header::InvalidHeaderValue),
    /// The CA file is not PEM.
    #[error("pulsar.tls_ca_file is not a PEM certificate: {0}")]
    BadCa(#[source] reqwest::Error),
    /// The client certificate or its key cannot be used.
    #[error("pulsar.auth.key_file {path}: {problem}")]
    BadKey {
        /// The key file.
        path: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The client certificate and key do not make an identity for the admin API.
    #[error("pulsar.auth.cert_file / key_file: {0}")]
    BadIdentity(#[source] reqwest::Error),
    /// The section names a kind it does not configure (`validate` reports it first).
    #[error("pulsar.auth: {0}")]
    Incomplete(String),
    /// An HTTP client (admin API, OAuth2 issuer) cannot be built.
    #[error("admin HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

fn read(key: &'static str, path: &str) -> Result<Vec<u8>, CredentialError> {
    std::fs::read(path).map_err(|source| CredentialError::ReadFile {
        key,
        path: path.to_string(),
        source,
    })
}

impl PulsarServiceConfig {
    fn legacy_token(&self) -> bool {
        non_empty(&self.token).is_some() || non_empty(&self.token_file).is_some()
    }

    /// The kind of credentials configured.
    pub fn auth_kind(&self) -> Option<AuthKind> {
        self.auth.kind(self.legacy_token())
    }

    /// Problems of the `auth` section (`file` names the service file in messages).
    pub fn check(&self, file: &Path) -> Vec<ConfigIssue> {
        let mut issues = self
            .auth
            .check(file, self.legacy_token(), (&self.url, &self.admin_url));
        if let Some(replication) = &self.replication {
            issues.extend(replication.check(file));
        }
        issues
    }

    /// The JWT to present, if any: `token`, else the contents of `token_file` (either
    /// here or under `auth`), read at each connect so that a rotated Secret is picked up.
    pub fn token(&self) -> Result<Option<String>, CredentialError> {
        let inline = non_empty(&self.token)
            .or(value(&self.auth.token))
            .map(str::to_string);
        let file = non_empty(&self.token_file)
            .or(value(&self.auth.token_file))
            .map(str::to_string);
        crate::secret::read(&inline, &file).map_err(|e| CredentialError::ReadFile {
            key: "token_file",
            path: e.path,
            source: e.source,
        })
    }

    /// The CA certificate (PEM) to trust, if configured.
    pub fn tls_ca(&self) -> Result<Option<Vec<u8>>, CredentialError> {
        non_empty(&self.tls_ca_file)
            .map(|path| read("tls_ca_file", path))
            .transpose()
    }

    /// The credentials to present (the OAuth2 session is made once per process).
    pub fn credentials(&self) -> Result<Credentials, CredentialError> {
        let incomplete = |what: &str| CredentialError::Incomplete(what.to_string());
        match self.auth_kind() {
            None => Err(incomplete("keys of several kinds are set; write `type`")),
            Some(AuthKind::None) => Ok(Credentials::None),
            Some(AuthKind::Token) => match self.token()? {
                Some(token) => Ok(Credentials::Token(token)),
                None => Err(incomplete("type token needs `token` or `token_file`")),
            },
            Some(AuthKind::OAuth2) => {
                if let Some(session) = self.oauth2.get() {
                    return Ok(Credentials::OAuth2(session.clone()));
                }
                let field = |f| value(f).map(str::to_string);
                let settings = OAuth2Settings {
                    issuer_url: field(&self.auth.issuer_url)
                        .ok_or_else(|| incomplete("type oauth2 needs `issuer_url`"))?,
                    audience: field(&self.auth.audience)
                        .ok_or_else(|| incomplete("type oauth2 needs `audience`"))?,
                    scope: field(&self.auth.scope),
                    credentials_file: field(&self.auth.credentials_file)
                        .map(PathBuf::from)
                        .ok_or_else(|| incomplete("type oauth2 needs `credentials_file`"))?,
                };
                let session = Arc::new(OAuth2Session::new(settings, self.http_client()?));
                Ok(Credentials::OAuth2(
                    self.oauth2.get_or_init(|| session).clone(),
                ))
            }
            Some(AuthKind::Tls) => {
                let (Some(cert_file), Some(key_file)) =
                    (value(&self.auth.cert_file), value(&self.auth.key_file))
                else {
                    return Err(incomplete("type tls needs `cert_file` and `key_file`"));
                };
                let key = read("auth.key_file", key_file)?;
                if let Some(problem) = key_problem(&key) {
                    return Err(CredentialError::BadKey {
                        path: key_file.to_string(),
                        problem,
                    });
                }
                Ok(Credentials::Tls(ClientCertificate {
                    chain: read("auth.cert_file", cert_file)?,
                    key,
                    cert_file: cert_file.to_string(),
                }))
            }
        }
    }

    /// Connects a Pulsar client with these credentials and CA; a refusal names its likely
    /// cause.
    pub async fn connect(&self) -> Result<Pulsar<TokioExecutor>, PulsarError> {
        // Bounded: a busy Exclusive subscription must become an error, not an endless wait;
        // callers that must not give up (consumer rebuild, DLQ) loop themselves.
        self.connect_with_operation_timeout(Duration::from_secs(30))
            .await
    }

    /// [`Self::connect`] with another operation timeout, which is also how long a sent
    /// message may wait for its receipt across reconnections (a producer that must ride out
    /// a broker restart needs longer than the default).
    pub async fn connect_with_operation_timeout(
        &self,
        operation_timeout: Duration,
    ) -> Result<Pulsar<TokioExecutor>, PulsarError> {
        let url = self.url.as_str();
        let credentials = self.credentials()?;
        // The first OAuth2 token is fetched before connecting: the issuer's refusal then
        // names its cause (unreachable, client refused, audience refused), where pulsar-rs
        // would report only that the connection failed.
        if let Credentials::OAuth2(session) = &credentials {
            session
                .token()
                .await
                .map_err(|source| PulsarError::OAuth2 {
                    url: url.to_string(),
                    source,
                })?;
        }
        let builder = Pulsar::builder(url, TokioExecutor).with_operation_retry_options(
            OperationRetryOptions {
                operation_timeout,
                retry_delay: Duration::from_secs(1),
                max_retries: Some(10),
            },
        );
        let mut builder = credentials.apply(builder);
        if let Some(pem) = self.tls_ca()? {
            builder = builder
                .with_certificate_chain(pem)
                .with_allow_insecure_connection(false)
                .with_tls_hostname_verification_enabled(true);
        }
        match builder.build().await {
            Ok(pulsar) => Ok(pulsar),
            // A refusal that is not retried (authentication, TLS handshake): the broker
            // only says "Unable to authenticate", so name what is likely at fault.
            Err(source) if source.to_string().contains("fatal error") => {
                let hint = credentials
                    .refusal_hint(url.starts_with("pulsar+ssl://"))
                    .await;
                Err(PulsarError::Connect {
                    url: url.to_string(),
                    source: pulsar::Error::Custom(format!("{source} ({hint})")),
                })
            }
            Err(source) => Err(PulsarError::Connect {
                url: url.to_string(),
                source,
            }),
        }
    }

    /// The admin REST API client of this cluster.
    pub fn admin(&self) -> Result<super::PulsarAdmin, CredentialError> {
        let credentials = self.credentials()?;
        let session = match &credentials {
            Credentials::OAuth2(session) => Some(session.clone()),
            _ => None,
        };
        Ok(super::PulsarAdmin::new(self.admin_client()?, &self.admin_url).with_oauth2(session))
    }

    /// An HTTP client for the admin REST API: a token as a bearer header (an OAuth2 token is
    /// added per request by [`super::PulsarAdmin`]), a client certificate, the CA trusted.
    pub fn admin_client(&self) -> Result<reqwest::Client, CredentialError> {
        let mut builder = self.http_builder()?;
        match self.credentials()? {
            Credentials::Token(token) => {
                let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(CredentialError::BadToken)?;
                value.set_sensitive(true);
                let mut headers = reqwest::header::HeaderMap::new();
                headers.insert(reqwest::header::AUTHORIZATION, value);
                builder = builder.default_headers(headers);
            }
            Credentials::Tls(certificate) => {
                let pem = [
                    certificate.chain.as_slice(),
                    b"\n",
                    certificate.key.as_slice(),
                ]
                .concat();
                let identity =
                    reqwest::Identity::from_pem(&pem).map_err(CredentialError::BadIdentity)?;
                builder = builder.identity(identity);
            }
            Credentials::None | Credentials::OAuth2(_) => {}
        }
        builder.build().map_err(CredentialError::Client)
    }

    /// An HTTP client with the CA trusted and no credentials, for the OAuth2 issuer.
    fn http_client(&self) -> Result<reqwest::Client, CredentialError> {
        self.http_builder()?
            .build()
            .map_err(CredentialError::Client)
    }

    fn http_builder(&self) -> Result<reqwest::ClientBuilder, CredentialError> {
        crate::tls::install_crypto_provider();
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
        if let Some(pem) = self.tls_ca()? {
            let certificate =
                reqwest::Certificate::from_pem(&pem).map_err(CredentialError::BadCa)?;
            builder = builder.add_root_certificate(certificate);
        }
        Ok(builder)
    }
}
