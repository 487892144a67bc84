//! The credentials the connector presents to Pulsar, on the binary protocol and to the admin
//! REST API alike: a JWT, OAuth2 client credentials, or a TLS client certificate.

mod config;
mod jwt;
mod oauth2;

use std::sync::Arc;

use async_trait::async_trait;
use pulsar::error::AuthenticationError;

pub use config::{value, AuthConfig, AuthKind};
pub use jwt::{claims, now_epoch_seconds, Claims};
pub use oauth2::{OAuth2Error, OAuth2Session, OAuth2Settings};

/// A TLS client certificate with its key, both PEM.
#[derive(Clone)]
pub struct ClientCertificate {
    /// The certificate chain, the client's own first.
    pub chain: Vec<u8>,
    /// The private key, PKCS#8.
    pub key: Vec<u8>,
    /// Where they came from, for messages.
    pub cert_file: String,
}

/// Never prints the key.
impl std::fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCertificate")
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

/// Why a key file cannot be used, beyond not being readable.
pub fn key_problem(pem: &[u8]) -> Option<&'static str> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("-----BEGIN PRIVATE KEY-----") {
        None
    } else if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        Some("the key is encrypted; give an unencrypted PKCS#8 key (openssl pkcs8 -topk8 -nocrypt)")
    } else if text.contains("PRIVATE KEY-----") {
        Some("the key is not PKCS#8 (`BEGIN PRIVATE KEY`); convert it with `openssl pkcs8 -topk8 -nocrypt -in key.pem`")
    } else {
        Some("no PEM private key found")
    }
}

/// Credentials in effect, resolved once per process so the binary protocol and the admin
/// API share one OAuth2 token.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// Anonymous.
    None,
    /// A JWT.
    Token(String),
    /// OAuth2 client credentials.
    OAuth2(Arc<OAuth2Session>),
    /// A client certificate.
    Tls(ClientCertificate),
}

impl Credentials {
    /// The kind, for messages.
    pub fn kind(&self) -> AuthKind {
        match self {
            Credentials::None => AuthKind::None,
            Credentials::Token(_) => AuthKind::Token,
            Credentials::OAuth2(_) => AuthKind::OAuth2,
            Credentials::Tls(_) => AuthKind::Tls,
        }
    }

    /// Gives the Pulsar client builder these credentials.
    pub fn apply<Exe: pulsar::Executor>(
        &self,
        builder: pulsar::PulsarBuilder<Exe>,
    ) -> pulsar::PulsarBuilder<Exe> {
        match self {
            Credentials::None => builder,
            Credentials::Token(token) => builder.with_auth(pulsar::Authentication {
                name: "token".into(),
                data: token.clone().into_bytes(),
            }),
            Credentials::OAuth2(session) => {
                builder.with_auth_provider(Box::new(OAuth2Provider(session.clone())))
            }
            // The broker's AuthenticationProviderTls takes the role from the certificate of
            // the TLS session, but only for a client that names the `tls` method: without
            // it the client would count as anonymous.
            Credentials::Tls(certificate) => builder
                .with_client_certificate(certificate.chain.clone(), certificate.key.clone())
                .with_auth(pulsar::Authentication {
                    name: "tls".into(),
                    data: Vec::new(),
                }),
        }
    }

    /// Why the broker most likely refused these credentials (it only says "Unable to
    /// authenticate"), for the connect error.
    pub async fn refusal_hint(&self, tls_url: bool) -> String {
        let why_token = |token: &str, what: &str| {
            match claims(token) {
            Some(claims) => match claims.expired_at(now_epoch_seconds()) {
                Some(at) => format!("the broker refused {what}: it expired at {at}"),
                None if !claims.audience.is_empty() || claims.issuer.is_some() => format!(
                    "the broker refused {what} (audience {:?}, issuer {:?}): does the broker trust this issuer and audience?",
                    claims.audience.join(","),
                    claims.issuer.unwrap_or_default()
                ),
                None => format!("the broker refused {what}"),
            },
            None => format!("the broker refused {what}"),
        }
        };
        match self {
            Credentials::None if tls_url => "the TLS handshake or the broker refused it: is the broker's certificate signed by pulsar.tls_ca_file, and does the broker require a client certificate (pulsar.auth type tls)?".into(),
            Credentials::None => "the broker refused it: does it require authentication (pulsar.auth)?".into(),
            Credentials::Token(token) => format!(
                "{}; check the token (pulsar.token / pulsar.token_file){}",
                why_token(token, "the token"),
                if tls_url { " and pulsar.tls_ca_file" } else { "" }
            ),
            Credentials::OAuth2(session) => {
                let settings = session.settings();
                match session.token().await {
                    Ok(token) => why_token(&token, &format!("the OAuth2 access token from {}", settings.issuer_url)),
                    Err(e) => e.to_string(),
                }
            }
            Credentials::Tls(certificate) => format!(
                "the TLS handshake or the broker refused the client certificate {}: is it signed by a CA the broker trusts, and the broker's certificate by pulsar.tls_ca_file?",
                certificate.cert_file
            ),
        }
    }
}

/// OAuth2 tokens for the binary protocol: asked at each (re)connect and at each
/// `AuthChallenge` (the broker asks again when the token it holds expired).
struct OAuth2Provider(Arc<OAuth2Session>);

#[async_trait]
impl pulsar::authentication::Authentication for OAuth2Provider {
    fn auth_method_name(&self) -> String {
        "token".into()
    }

    async fn initialize(&mut self) -> Result<(), AuthenticationError> {
        Ok(())
    }

    async fn auth_data(&mut self) -> Result<Vec<u8>, AuthenticationError> {
        match self.0.token().await {
            Ok(token) => Ok(token.into_bytes()),
            // pulsar-rs retries a connection only on a "retriable" authentication error.
            Err(e) if e.is_transient() => Err(AuthenticationError::Retriable(e.to_string())),
            Err(e) => Err(AuthenticationError::Custom(e.to_string())),
        }
    }
}
