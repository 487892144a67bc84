//! The process's one TLS crypto provider. Every TLS client of the connector (Pulsar, Redis,
//! the object stores, the Pulsar admin API and the OAuth2 issuer) runs on rustls with `ring`,
//! the provider `object_store` needs anyway; compiling a second one (aws-lc) cost a minute of
//! every fresh build. Clients that take the process default (reqwest's) need it installed
//! before they are built, hence one call at start-up and one before each such client.

/// Installs `ring` as the process-wide rustls provider; later calls, and a provider
/// installed by someone else first, leave it as it is.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another thread installing the same provider is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// An HTTP client without settings of its own (tests, one-off requests), built after the
/// provider is installed.
pub fn http_client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::new()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_provider_is_installed_once_and_stays() {
        super::install_crypto_provider();
        super::install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
