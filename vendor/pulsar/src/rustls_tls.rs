//! feature-connector patch: TLS for the rustls runtimes with what the native-tls runtimes
//! offer: a client certificate presented in every handshake, and the system's trust store
//! beside the bundled Mozilla roots and the configured CA certificates.

use std::sync::{Arc, OnceLock};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{error::ConnectionError, Certificate};

/// A client certificate chain and its private key, presented in TLS handshakes.
pub struct ClientIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for ClientIdentity {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl ClientIdentity {
    /// Reads a PEM certificate chain (the client's certificate first) and a PEM private key
    /// (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(chain: &[u8], key: &[u8]) -> Result<Self, ConnectionError> {
        let bad = |what: String| ConnectionError::Unexpected(format!("client certificate: {what}"));
        let chain: Vec<CertificateDer<'static>> = pem::parse_many(chain)
            .map_err(|e| bad(format!("the certificate chain is not PEM: {e}")))?
            .into_iter()
            .filter(|block| block.tag() == "CERTIFICATE")
            .map(|block| CertificateDer::from(block.into_contents()))
            .collect();
        if chain.is_empty() {
            return Err(bad("the certificate chain holds no CERTIFICATE block".into()));
        }
        let key = pem::parse(key).map_err(|e| bad(format!("the private key is not PEM: {e}")))?;
        let key = match key.tag() {
            "PRIVATE KEY" => PrivateKeyDer::Pkcs8(key.into_contents().into()),
            "RSA PRIVATE KEY" => PrivateKeyDer::Pkcs1(key.into_contents().into()),
            "EC PRIVATE KEY" => PrivateKeyDer::Sec1(key.into_contents().into()),
            other => return Err(bad(format!("unsupported private key block `{other}`"))),
        };
        Ok(Self { chain, key })
    }
}

/// The system's trust store, read once per process (errors leave it empty: the bundled
/// roots and the configured CA still apply).
fn native_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// The client configuration of one TLS connection: the bundled and system roots, the
/// configured CA certificates, and the client certificate when there is one.
pub fn client_config(
    certificate_chain: &[Certificate],
    client_identity: Option<&ClientIdentity>,
) -> Result<Arc<rustls::ClientConfig>, ConnectionError> {
    let mut root_store = rustls::RootCertStore::empty();
    root_store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    root_store.add_parsable_certificates(native_roots().iter().cloned());
    for certificate in certificate_chain {
        root_store.add(certificate.clone())?;
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(root_store);
    let config = match client_identity {
        Some(identity) => {
            builder.with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}
