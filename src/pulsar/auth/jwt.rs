//! What a JWT says about itself (expiry, audience), read without verifying it: only to
//! tell an operator why a broker refused a token, never to decide anything.

use base64::Engine;

/// The claims of a JWT that explain a refusal.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `exp`: seconds since the epoch.
    pub expires_at: Option<i64>,
    /// `aud`: one string or a list.
    pub audience: Vec<String>,
    /// `iss`.
    pub issuer: Option<String>,
}

/// The claims of `token`, or `None` when it is not a JWT (an opaque token).
pub fn claims(token: &str) -> Option<Claims> {
    let payload = token.trim().split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let json: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let audience = match &json["aud"] {
        serde_json::Value::String(one) => vec![one.clone()],
        serde_json::Value::Array(many) => many
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    Some(Claims {
        expires_at: json["exp"].as_i64(),
        audience,
        issuer: json["iss"].as_str().map(str::to_string),
    })
}

impl Claims {
    /// The expiry as RFC 3339 when it has passed at `now` (seconds since the epoch).
    pub fn expired_at(&self, now: i64) -> Option<String> {
        let exp = self.expires_at.filter(|&exp| exp <= now)?;
        Some(
            chrono::DateTime::from_timestamp(exp, 0)
                .map(|t| t.to_rfc3339())
                .unwrap_or_else(|| exp.to_string()),
        )
    }
}

/// Seconds since the epoch now.
pub fn now_epoch_seconds() -> i64 {
    chrono::Utc::now().timestamp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(payload: &str) -> String {
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.signature", enc(r#"{"alg":"RS256"}"#), enc(payload))
    }

    #[test]
    fn reads_expiry_audience_and_issuer() {
        let claims = claims(&jwt(
            r#"{"exp":1000,"aud":["pulsar","x"],"iss":"http://i"}"#,
        ))
        .expect("a JWT");
        assert_eq!(claims.expires_at, Some(1000));
        assert_eq!(claims.audience, ["pulsar", "x"]);
        assert_eq!(claims.issuer.as_deref(), Some("http://i"));
        assert_eq!(
            claims.expired_at(1000).as_deref(),
            Some("1970-01-01T00:16:40+00:00")
        );
        assert_eq!(claims.expired_at(999), None);
        let one = super::claims(&jwt(r#"{"aud":"pulsar"}"#)).expect("a JWT");
        assert_eq!(one.audience, ["pulsar"]);
        assert_eq!(one.expired_at(i64::MAX), None);
    }

    #[test]
    fn an_opaque_token_has_no_claims() {
        assert_eq!(claims("opaque"), None);
        assert_eq!(claims("a.!!!.c"), None);
    }
}
