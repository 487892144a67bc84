//! One Redis server or a Redis Cluster, behind one small interface, with optional TLS.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, IntoConnectionInfo,
    ProtocolVersion, PushInfo, PushKind, RedisResult, Script, ServerErrorKind, TlsCertificates,
};

use super::{RedisMode, RedisServiceConfig};

/// A configured client that can (re)connect.
#[derive(Clone)]
pub enum RedisClient {
    /// One server.
    Single(Client, AsyncConnectionConfig),
    /// A cluster: keys are routed to the node owning their slot.
    Cluster(ClusterClient),
}

/// A live, multiplexed connection (cheap to clone).
#[derive(Clone)]
pub enum RedisConnection {
    /// One server; for a tracking connection, the flag it raises when it drops.
    Single(MultiplexedConnection, Option<Arc<AtomicBool>>),
    /// A cluster.
    Cluster(ClusterConnection),
}

/// The Redis client cannot be set up from the service config.
#[derive(Debug, thiserror::Error)]
pub enum RedisSetupError {
    /// `redis.tls_ca_file` cannot be read.
    #[error("cannot read redis.tls_ca_file {path}: {source}")]
    ReadCa {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Client tracking (`serving.cache_entities`) was asked of a Redis Cluster.
    #[error("serving.cache_entities needs redis.mode standalone: client tracking is per server connection")]
    TrackingOnCluster,
    /// The URL (or a cluster node's) is not a Redis URL.
    #[error("invalid Redis URL: {0}")]
    InvalidUrl(#[source] redis::RedisError),
}

impl RedisClient {
    /// A client for the service config: URL(s), timeouts, TLS root certificate.
    pub fn open(service: &RedisServiceConfig) -> Result<Self, RedisSetupError> {
        Self::open_with(service, None)
    }

    /// Like [`RedisClient::open`], speaking RESP3 so that a connection can hear what Redis
    /// pushes ([`RedisClient::connect_tracking`]); one server only.
    pub fn open_tracking(service: &RedisServiceConfig) -> Result<Self, RedisSetupError> {
        if service.mode == RedisMode::Cluster {
            return Err(RedisSetupError::TrackingOnCluster);
        }
        Self::open_with(service, Some(ProtocolVersion::RESP3))
    }

    fn open_with(
        service: &RedisServiceConfig,
        protocol: Option<ProtocolVersion>,
    ) -> Result<Self, RedisSetupError> {
        let certificates = match &service.tls_ca_file {
            Some(path) => Some(TlsCertificates {
                client_tls: None,
                root_cert: Some(
                    std::fs::read(path).map_err(|source| RedisSetupError::ReadCa {
                        path: path.clone(),
                        source,
                    })?,
                ),
            }),
            None => None,
        };
        let invalid = RedisSetupError::InvalidUrl;
        // Nagle's algorithm would hold a pipelined write back until Redis acknowledged the
        // previous one: the writer keeps several batches in flight on one connection.
        let tcp = TcpSettings::default().set_nodelay(true);
        match service.mode {
            RedisMode::Standalone => {
                let info = service
                    .url
                    .as_str()
                    .into_connection_info()
                    .map_err(invalid)?
                    .set_tcp_settings(tcp);
                let info = match protocol {
                    Some(protocol) => {
                        let settings = info.redis_settings().clone().set_protocol(protocol);
                        info.set_redis_settings(settings)
                    }
                    None => info,
                };
                let client = match certificates {
                    Some(certs) => Client::build_with_tls(info, certs).map_err(invalid)?,
                    None => Client::open(info).map_err(invalid)?,
                };
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(5)))
                    .set_response_timeout(Some(service.response_timeout));
                Ok(RedisClient::Single(client, config))
            }
            RedisMode::Cluster => {
                let nodes: Vec<&str> = service
                    .url
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                let mut builder = ClusterClient::builder(nodes)
                    .tcp_settings(tcp)
                    .connection_timeout(Duration::from_secs(5))
                    .response_timeout(service.response_timeout);
                if let Some(certs) = certificates {
                    builder = builder.certs(certs);
                }
                Ok(RedisClient::Cluster(builder.build().map_err(invalid)?))
            }
        }
    }

    /// Whether this is a Redis Cluster (a script call may then touch one hash slot only).
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisClient::Cluster(_))
    }

    /// Connects (for a cluster: discovers the slot map).
    pub async fn connect(&self) -> RedisResult<RedisConnection> {
        match self {
            RedisClient::Single(client, config) => Ok(RedisConnection::Single(
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?,
                None,
            )),
            RedisClient::Cluster(client) => Ok(RedisConnection::Cluster(
                client.get_async_connection().await?,
            )),
        }
    }

    /// Connects with `CLIENT TRACKING ON` (a client from [`RedisClient::open_tracking`]):
    /// Redis then pushes an invalidation when a key this connection read changes. Every push,
    /// and the connection's drop (a `Disconnection` push), goes to `on_push` in the order
    /// Redis sent it among the replies.
    pub async fn connect_tracking(
        &self,
        on_push: impl Fn(&PushInfo) + Send + Sync + 'static,
    ) -> RedisResult<RedisConnection> {
        let RedisClient::Single(client, config) = self else {
            return Err(redis::RedisError::from((
                ErrorKind::InvalidClientConfig,
                "client tracking is not supported on a Redis Cluster",
            )));
        };
        // A dropped connection hears of no more writes: the flag tells its user to connect
        // again rather than trust what it learnt through it.
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        let config = config.clone().set_push_sender(move |push: PushInfo| {
            if push.kind == PushKind::Disconnection {
                flag.store(true, Ordering::Release);
            }
            on_push(&push);
            Ok::<(), std::convert::Infallible>(())
        });
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .query_async::<()>(&mut connection)
            .await?;
        Ok(RedisConnection::Single(connection, Some(dropped)))
    }
}

impl RedisConnection {
    /// Whether a tracking connection has dropped (what it cached may be stale: it must be
    /// replaced).
    pub fn has_dropped(&self) -> bool {
        match self {
            RedisConnection::Single(_, Some(dropped)) => dropped.load(Ordering::Acquire),
            RedisConnection::Single(_, None) | RedisConnection::Cluster(_) => false,
        }
    }

    /// Whether this is a connection to a Redis Cluster (a script call may then touch one
    /// hash slot only).
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConnection::Cluster(_))
    }

    /// Runs `commands` and returns their replies in order: one pipelined round trip on a
    /// single server; on a cluster each is routed by its key, all in flight at once.
    pub async fn query_all<T: FromRedisValue>(
        &mut self,
        commands: Vec<Cmd>,
    ) -> RedisResult<Vec<T>> {
        match self {
            RedisConnection::Single(connection, _) => {
                let mut pipe = redis::pipe();
                for command in commands {
                    pipe.add_command(command);
                }
                pipe.query_async(connection).await
            }
            RedisConnection::Cluster(connection) => {
                let calls = commands.into_iter().map(|command| {
                    let mut connection = connection.clone();
                    async move { command.query_async::<T>(&mut connection).await }
                });
                futures::future::try_join_all(calls).await
            }
        }
    }

    /// Runs `calls` (`EVALSHA`s of `script`): one pipelined round trip on a single server,
    /// on a cluster each routed by its key, all in flight at once. Where the server lacks
    /// the script (a restart or `SCRIPT FLUSH` emptied its cache) it is loaded and the calls
    /// run again; they are idempotent.
    pub async fn invoke_all(&mut self, script: &Script, calls: &[Cmd]) -> RedisResult<()> {
        self.invoke_all_replies::<redis::Value>(script, calls)
            .await
            .map(|_| ())
    }

    /// [`RedisConnection::invoke_all`], returning each call's reply in order.
    pub async fn invoke_all_replies<T: FromRedisValue>(
        &mut self,
        script: &Script,
        calls: &[Cmd],
    ) -> RedisResult<Vec<T>> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            RedisConnection::Single(connection, _) => {
                let mut pipe = redis::Pipeline::with_capacity(calls.len());
                for call in calls {
                    pipe.add_command(call.clone());
                }
                match pipe.query_async::<Vec<T>>(connection).await {
                    Err(e) if lacks_script(&e) => {
                        script.load_async(connection).await?;
                        pipe.query_async::<Vec<T>>(connection).await
                    }
                    outcome => outcome,
                }
            }
            RedisConnection::Cluster(connection) => {
                let calls = calls.iter().map(|call| {
                    let mut connection = connection.clone();
                    async move {
                        match call.query_async::<T>(&mut connection).await {
                            Err(e) if lacks_script(&e) => {
                                script.load_async(&mut connection).await?;
                                call.query_async::<T>(&mut connection).await
                            }
                            outcome => outcome,
                        }
                    }
                });
                futures::future::try_join_all(calls).await
            }
        }
    }
}

/// Redis answered `NOSCRIPT`: its script cache does not hold the script (yet, or any more).
fn lacks_script(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}
