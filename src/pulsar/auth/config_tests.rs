//! `pulsar.auth` checks: what `validate` and `run` report before anything connects.

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
