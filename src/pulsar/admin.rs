//! The broker's admin REST API (`/admin/v2/…`): one client for the schema registry, topic
//! stats and namespace policies, with the service's credentials and CA.

use serde::de::DeserializeOwned;

use std::sync::Arc;

use super::auth::{OAuth2Error, OAuth2Session};
use super::topic::{BadTopicName, TopicName};

/// A failed admin request.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The HTTP request failed (network, timeout).
    #[error("Pulsar admin request {url} failed: {source}")]
    Http {
        /// The URL requested.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The broker answered with an error status (or a body that is not what was asked for).
    #[error("Pulsar admin {url} answered {status}: {body}")]
    Status {
        /// The URL requested.
        url: String,
        /// HTTP status.
        status: u16,
        /// Response body (truncated).
        body: String,
    },
    /// The topic name cannot be turned into an admin path.
    #[error(transparent)]
    BadTopic(#[from] BadTopicName),
    /// No OAuth2 access token to send.
    #[error("Pulsar admin request {url}: {source}")]
    Token {
        /// The URL requested.
        url: String,
        /// Why.
        #[source]
        source: OAuth2Error,
    },
}

impl AdminError {
    /// Whether a retry may help (network trouble or a 5xx), as opposed to a missing object.
    pub fn is_transient(&self) -> bool {
        match self {
            AdminError::Http { .. } => true,
            AdminError::Status { status, .. } => *status >= 500,
            AdminError::BadTopic(_) => false,
            AdminError::Token { source, .. } => source.is_transient(),
        }
    }

    /// Whether the broker answered 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, AdminError::Status { status: 404, .. })
    }
}

/// Client of one broker's admin API.
#[derive(Debug, Clone)]
pub struct PulsarAdmin {
    http: reqwest::Client,
    base: String,
    /// OAuth2 tokens, sent as a bearer header per request (they change; a static token or a
    /// client certificate is part of `http`).
    oauth2: Option<Arc<OAuth2Session>>,
}

impl PulsarAdmin {
    /// A client for `admin_url` (e.g. `http://127.0.0.1:8080`) sending with `http`, which
    /// carries the credentials and CA (see `PulsarServiceConfig::admin_client`).
    pub fn new(http: reqwest::Client, admin_url: &str) -> Self {
        Self {
            http,
            base: admin_url.trim_end_matches('/').to_string(),
            oauth2: None,
        }
    }

    /// Sends each request with an access token of `session` (the binary protocol's).
    pub fn with_oauth2(mut self, session: Option<Arc<OAuth2Session>>) -> Self {
        self.oauth2 = session;
        self
    }

    async fn authorized(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, AdminError> {
        match &self.oauth2 {
            // `bearer_auth` marks the header sensitive: it is never logged.
            Some(session) => match session.token().await {
                Ok(token) => Ok(request.bearer_auth(token)),
                Err(source) => Err(AdminError::Token {
                    url: url.to_string(),
                    source,
                }),
            },
            None => Ok(request),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/admin/v2/{path}", self.base)
    }

    /// `GET /admin/v2/{path}`: the body of a successful answer.
    pub async fn get(&self, path: &str) -> Result<String, AdminError> {
        let url = self.url(path);
        let request = self.authorized(self.http.get(&url), &url).await?;
        send(request, url).await
    }

    /// `POST /admin/v2/{path}` with a JSON body: the body of a successful answer.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<String, AdminError> {
        self.send_json(reqwest::Method::POST, path, body).await
    }

    /// `PUT /admin/v2/{path}` with a JSON body: the body of a successful answer.
    pub async fn put_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<String, AdminError> {
        self.send_json(reqwest::Method::PUT, path, body).await
    }

    async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<String, AdminError> {
        let url = self.url(path);
        let request = self
            .authorized(self.http.request(method, &url).json(body), &url)
            .await?;
        send(request, url).await
    }

    /// `GET /admin/v2/{path}` parsed as `T`.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, AdminError> {
        let body = self.get(path).await?;
        parse(&self.url(path), &body)
    }

    /// The broker's stats of one topic or partition (`…/stats`).
    pub async fn topic_stats(&self, topic: &str) -> Result<serde_json::Value, AdminError> {
        let name = TopicName::parse(topic)?;
        self.get_json(&format!("{}/stats", name.admin_path())).await
    }

    /// The managed ledger's internal stats of one topic or partition (`…/internalStats`):
    /// among others each cursor's mark-delete position and acknowledged ranges.
    pub async fn internal_stats(&self, topic: &str) -> Result<serde_json::Value, AdminError> {
        let name = TopicName::parse(topic)?;
        self.get_json(&format!("{}/internalStats", name.admin_path()))
            .await
    }

    /// Creates the durable subscription `subscription` on `topic` at its earliest message
    /// (creating the topic if the broker allows auto-creation). Returns whether it is new;
    /// one that already exists is left where it is.
    pub async fn ensure_subscription(
        &self,
        topic: &str,
        subscription: &str,
    ) -> Result<bool, AdminError> {
        let name = TopicName::parse(topic)?;
        let path = format!(
            "{}/subscription/{}",
            name.admin_path(),
            percent_encoding::utf8_percent_encode(subscription, percent_encoding::NON_ALPHANUMERIC)
        );
        // MessageId (-1, -1) is the earliest position.
        let earliest = serde_json::json!({"ledgerId": -1, "entryId": -1, "partitionIndex": -1});
        match self.put_json(&path, &earliest).await {
            Ok(_) => Ok(true),
            Err(AdminError::Status { status: 409, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The retention policy of `namespace` (`tenant/namespace`).
    pub async fn namespace_retention(
        &self,
        namespace: &str,
    ) -> Result<serde_json::Value, AdminError> {
        self.get_json(&format!("namespaces/{namespace}/retention"))
            .await
    }
}

async fn send(request: reqwest::RequestBuilder, url: String) -> Result<String, AdminError> {
    let response = match request.send().await {
        Ok(response) => response,
        Err(source) => return Err(AdminError::Http { url, source }),
    };
    let status = response.status();
    let body = match response.text().await {
        Ok(body) => body,
        Err(source) => return Err(AdminError::Http { url, source }),
    };
    if status.is_success() {
        Ok(body)
    } else {
        Err(AdminError::Status {
            url,
            status: status.as_u16(),
            body: body.chars().take(500).collect(),
        })
    }
}

/// Parses an answer; a body of the wrong shape is reported like an error status.
pub fn parse<T: DeserializeOwned>(url: &str, body: &str) -> Result<T, AdminError> {
    serde_json::from_str(body).map_err(|e| AdminError::Status {
        url: url.to_string(),
        status: 200,
        body: format!(
            "unexpected answer ({e}): {}",
            body.chars().take(300).collect::<String>()
        ),
    })
}
