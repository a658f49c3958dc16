//! A recipe's webhooks (`[webhook]`): how a sender is verified and where a delivery's ids and
//! state are read. Three schemes:
//!
//! - `standard_webhooks`: the `webhook-id`/`webhook-timestamp`/`webhook-signature` headers over the
//!   raw body, with a `whsec_` secret (Gemini's project webhooks), tolerance 5 minutes;
//! - `hmac`: an HMAC-SHA256 of the raw body in a named header, hex or base64, with or without a
//!   prefix such as `sha256=` (Cursor's `X-Webhook-Signature: sha256=<hex>`);
//! - `url_token`: the sender signs nothing (RunPod), so the webhook URL carries a secret token
//!   (`/hooks/{provider}/{token}`), compared in constant time; such a delivery is only a hint that
//!   makes the engine poll the job at once, its body never moves a job;
//! - `header`: the sender proves itself with a header the user chooses, whose value is the secret
//!   itself (AssemblyAI's `webhook_auth_header_name`/`_value`), compared in constant time; it
//!   covers no part of the body, so such a delivery is a hint too, as a URL token's;
//! - `jwt`: an RS256 JWT checked against the platform's key set, with an account proof
//!   (`jwt`: a platform's token proves the platform, never whose delivery it is). The token
//!   covers no part of the body, so such a delivery is a hint too: the poll it causes moves the
//!   job.
//!
//! A delivery's id is the dedupe key: read from a header only when the signature covers it
//! (Standard Webhooks); an HMAC of the body alone leaves its headers open to change, so the
//! body's hash is the id then (`delivery_id_header` is accepted and read as that).
//!
//! The secret of each is the provider's webhook secret (`NEVERMISS_<NAME>_WEBHOOK_SECRET` or
//! Settings). Every verified delivery also makes the engine poll its job right after the answer
//! (webhooks are thin: the poll brings the result, the times and the error).
//!
//! ```toml
//! [webhook]
//! verify = "hmac"
//! header = "X-Webhook-Signature"
//! prefix = "sha256="
//! encoding = "hex"                 # or base64
//! job_id = ".id"                   # jq, on the body
//! delivery_id = ".event_id"        # else the body's hash
//! state = ".status"                # read with [states]; signed schemes only
//! ```

use hmac::{Hmac, Mac};
use reqwest::header::HeaderMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::expression::{self, Expression, Output};
use crate::standard_webhooks::{self, SecretFormat};
use crate::VerifyError;

/// How a recipe's sender is verified.
#[derive(Debug, Clone)]
pub enum Scheme {
    StandardWebhooks,
    Hmac {
        header: String,
        prefix: String,
        encoding: Encoding,
    },
    UrlToken,
    /// A named header whose value is the secret (lower-cased name).
    Header {
        header: String,
    },
    Jwt(Box<super::jwt::Jwt>),
}

impl Scheme {
    /// Whether the sender's proof covers the body, so that what the body says may move a job.
    /// A URL token proves only who knows the URL, a JWT only the platform (the body is not in it):
    /// their deliveries are hints that make the engine poll the job.
    pub fn signs_the_body(&self) -> bool {
        matches!(self, Scheme::StandardWebhooks | Scheme::Hmac { .. })
    }
}

/// How an HMAC signature is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
}

/// Where a delivery's id (the dedupe key) is read.
#[derive(Debug, Clone)]
pub enum DeliveryId {
    /// A header's value (`X-Webhook-ID`); `webhook-id` for Standard Webhooks by default.
    Header(String),
    /// An expression on the body.
    Expression(Expression),
    /// The SHA-256 of the body: the same body twice is one delivery.
    BodyHash,
}

/// A recipe's webhooks, checked.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub scheme: Scheme,
    pub job_id: Expression,
    pub delivery_id: DeliveryId,
    /// The state the delivery says, read with the recipe's `[states]` (signed schemes only).
    pub state: Option<Expression>,
}

/// `[webhook]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WrittenWebhook {
    verify: String,
    header: Option<String>,
    prefix: Option<String>,
    encoding: Option<String>,
    job_id: String,
    delivery_id: Option<String>,
    delivery_id_header: Option<String>,
    state: Option<String>,
    // verify = "jwt" only (see `jwt`).
    jwks_url: Option<String>,
    audience: Option<String>,
    issuer: Option<String>,
    account: Option<String>,
    owner: Option<String>,
}

/// What a verified delivery said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub delivery_id: String,
    pub job_id: String,
    /// The provider's state value, when the recipe reads one (a signed scheme).
    pub value: Option<String>,
}

impl Webhook {
    /// Checks `[webhook]`; each refusal is `(key, problem)`, the key under `webhook.`.
    pub(super) fn check(written: &WrittenWebhook) -> Result<Webhook, (String, String)> {
        let refuse = |key: &str, problem: &str| (format!("webhook.{key}"), problem.to_owned());
        let hmac_only = [("prefix", &written.prefix), ("encoding", &written.encoding)];
        let jwt_only = [
            ("jwks_url", &written.jwks_url),
            ("audience", &written.audience),
            ("issuer", &written.issuer),
            ("account", &written.account),
            ("owner", &written.owner),
        ];
        let scheme = match written.verify.as_str() {
            "standard_webhooks" => Scheme::StandardWebhooks,
            "url_token" => Scheme::UrlToken,
            "header" => {
                let header = written.header.as_deref().map(str::trim).filter(|h| !h.is_empty());
                let header = header.ok_or_else(|| refuse("header", "is missing: name the header the sender puts its secret in"))?;
                if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
                    return Err(refuse("header", "is not a header's name"));
                }
                Scheme::Header { header: header.to_ascii_lowercase() }
            }
            "hmac" => {
                let header = written.header.as_deref().map(str::trim).filter(|h| !h.is_empty());
                let header = header.ok_or_else(|| refuse("header", "is missing: name the header that carries the signature"))?;
                if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
                    return Err(refuse("header", "is not a header's name"));
                }
                let encoding = match written.encoding.as_deref() {
                    None | Some("hex") => Encoding::Hex,
                    Some("base64") => Encoding::Base64,
                    Some(_) => return Err(refuse("encoding", "write hex or base64")),
                };
                Scheme::Hmac { header: header.to_ascii_lowercase(), prefix: written.prefix.clone().unwrap_or_default(), encoding }
            }
            "jwt" => Scheme::Jwt(Box::new(super::jwt::Jwt::check(super::jwt::WrittenJwt {
                header: written.header.as_deref(),
                jwks_url: written.jwks_url.as_deref(),
                audience: written.audience.as_deref(),
                issuer: written.issuer.as_deref(),
                account: written.account.as_deref(),
                owner: written.owner.as_deref(),
            })?)),
            _ => return Err(refuse("verify", "write standard_webhooks, hmac, header, url_token or jwt")),
        };
        if !matches!(scheme, Scheme::Hmac { .. }) {
            if let Some((key, _)) = hmac_only.iter().find(|(_, value)| value.is_some()) {
                return Err(refuse(key, "is read only with verify = \"hmac\": remove it"));
            }
        }
        if !matches!(scheme, Scheme::Hmac { .. } | Scheme::Header { .. } | Scheme::Jwt(_)) && written.header.is_some() {
            return Err(refuse("header", "is read only with verify = \"hmac\", \"header\" or \"jwt\": remove it"));
        }
        if !matches!(scheme, Scheme::Jwt(_)) {
            if let Some((key, _)) = jwt_only.iter().find(|(_, value)| value.is_some()) {
                return Err(refuse(key, "is read only with verify = \"jwt\": remove it"));
            }
        }
        if !scheme.signs_the_body() && written.state.is_some() {
            return Err(refuse(
                "state",
                "a sender whose proof does not cover the body (a URL token, a secret header, a JWT) is only a hint: the job is polled at once, and the poll says its state; remove it",
            ));
        }
        let compile = |key: &str, text: &str| Expression::compile(text).map_err(|p| (format!("webhook.{key}"), p));
        let delivery_id = match (&written.delivery_id, &written.delivery_id_header) {
            (Some(_), Some(_)) => return Err(refuse("delivery_id", "write delivery_id or delivery_id_header, not both")),
            (Some(text), None) => DeliveryId::Expression(compile("delivery_id", text)?),
            // A header the signature covers names the delivery; one it does not (an HMAC of the
            // body alone) could be changed at will to make a resend a new delivery: the body's
            // hash names it then.
            (None, Some(header)) if reqwest::header::HeaderName::from_bytes(header.trim().as_bytes()).is_ok() => {
                if matches!(scheme, Scheme::StandardWebhooks) {
                    DeliveryId::Header(header.trim().to_ascii_lowercase())
                } else {
                    DeliveryId::BodyHash
                }
            }
            (None, Some(_)) => return Err(refuse("delivery_id_header", "is not a header's name")),
            (None, None) if matches!(scheme, Scheme::StandardWebhooks) => DeliveryId::Header(standard_webhooks::ID_HEADER.to_owned()),
            (None, None) => DeliveryId::BodyHash,
        };
        Ok(Webhook {
            scheme,
            job_id: compile("job_id", &written.job_id)?,
            delivery_id,
            state: written.state.as_deref().map(|t| compile("state", t)).transpose()?,
        })
    }

    /// Whether the sender signs nothing and the webhook URL carries the token instead.
    pub fn takes_url_token(&self) -> bool {
        matches!(self.scheme, Scheme::UrlToken)
    }

    /// The JWT scheme, when the recipe verifies by one (checked by the provider, which holds the
    /// key set: `jwt::Jwt::verify`).
    pub fn jwt(&self) -> Option<&super::jwt::Jwt> {
        match &self.scheme {
            Scheme::Jwt(jwt) => Some(jwt),
            _ => None,
        }
    }

    /// Checks a request's signature on the raw body with `secret` (the provider's webhook secret);
    /// `provider` names it in the errors. A URL-token sender's request is checked by
    /// `verify_token`: here it is missing its token.
    pub fn verify(&self, provider: &'static str, secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        match &self.scheme {
            Scheme::StandardWebhooks => standard_webhooks::verify_with_secret(provider, SecretFormat::Base64, secret, headers, body),
            Scheme::Hmac { header, prefix, encoding } => {
                let written = headers.get(header.as_str()).and_then(|v| v.to_str().ok()).map(str::trim);
                let written = written.filter(|w| !w.is_empty()).ok_or(VerifyError::Missing(SIGNATURE_HEADER))?;
                let signature = written.strip_prefix(prefix.as_str()).ok_or(VerifyError::Invalid)?;
                let signature = match encoding {
                    Encoding::Hex => hex::decode(signature).ok(),
                    Encoding::Base64 => {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD.decode(signature).ok()
                    }
                }
                .ok_or(VerifyError::Invalid)?;
                let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| VerifyError::Invalid)?;
                mac.update(body);
                mac.verify_slice(&signature).map_err(|_| VerifyError::Invalid)
            }
            Scheme::UrlToken => Err(VerifyError::Missing(URL_TOKEN)),
            Scheme::Header { header } => {
                let written = headers.get(header.as_str()).map(|v| v.as_bytes()).filter(|w| !w.is_empty());
                let written = written.ok_or(VerifyError::Missing(SECRET_HEADER))?;
                // Hashed first, so the comparison takes the same time whatever the lengths.
                let (a, b) = (Sha256::digest(secret.as_bytes()), Sha256::digest(written));
                if bool::from(a.ct_eq(&b)) {
                    Ok(())
                } else {
                    Err(VerifyError::Invalid)
                }
            }
            // Checked with its key set by the provider (`jwt::Jwt::verify`), never here.
            Scheme::Jwt(_) => Err(VerifyError::Invalid),
        }
    }

    /// Checks the token of a URL-token sender's webhook URL against `secret`, in constant time.
    pub fn verify_token(&self, secret: &str, token: &str) -> Result<(), VerifyError> {
        if !matches!(self.scheme, Scheme::UrlToken) {
            return Err(VerifyError::Invalid);
        }
        // Hashed first, so the comparison takes the same time whatever the lengths.
        let (a, b) = (Sha256::digest(secret.as_bytes()), Sha256::digest(token.as_bytes()));
        if bool::from(a.ct_eq(&b)) {
            Ok(())
        } else {
            Err(VerifyError::Invalid)
        }
    }

    /// Reads a verified delivery: its id, its job's id and the state value it says. A body
    /// without a job id is an error naming the expression.
    pub fn read(&self, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, String> {
        let value = expression::read_json(body)?;
        let text = |e: &Expression| -> Result<Option<String>, String> {
            Ok(match e.run_on(value.clone())? {
                Output::Nothing | Output::Value(serde_json::Value::Null) => None,
                Output::Value(serde_json::Value::String(s)) => Some(s),
                Output::Value(other) => Some(other.to_string()),
            }
            .filter(|s| !s.is_empty()))
        };
        let job_id = text(&self.job_id)?.ok_or_else(|| format!("`{}` found no job id in the delivery", self.job_id.text()))?;
        let delivery_id = match &self.delivery_id {
            DeliveryId::Header(name) => headers
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("the delivery has no {name} header"))?,
            DeliveryId::Expression(e) => text(e)?.ok_or_else(|| format!("`{}` found no delivery id", e.text()))?,
            DeliveryId::BodyHash => format!("sha256:{}", hex::encode(&Sha256::digest(body)[..16])),
        };
        let value = match &self.state {
            Some(e) => text(e)?,
            None => None,
        };
        Ok(Delivery { delivery_id, job_id, value })
    }
}

/// What a refusal names when the signature header is missing.
const SIGNATURE_HEADER: &str = "the recipe's signature header";
/// What a refusal names when a URL-token sender's request has no token.
const SECRET_HEADER: &str = "the recipe's secret header";
const URL_TOKEN: &str = "the token in the webhook URL (/hooks/NAME/TOKEN)";

#[cfg(test)]
mod tests {
    use super::*;

    fn webhook(toml_text: &str) -> Result<Webhook, (String, String)> {
        let written: WrittenWebhook = toml::from_str(toml_text).expect("TOML");
        Webhook::check(&written)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    fn hmac_hex(secret: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
    }

    const CURSOR_LIKE: &str = r#"
verify = "hmac"
header = "X-Webhook-Signature"
prefix = "sha256="
job_id = ".id"
delivery_id_header = "X-Webhook-ID"
state = ".status"
"#;

    #[test]
    fn an_hmac_of_the_raw_body_in_a_named_header_with_its_prefix() {
        let w = webhook(CURSOR_LIKE).unwrap();
        let body = br#"{"event":"statusChange","id":"bc-1","status":"FINISHED"}"#;
        let good = format!("sha256={}", hmac_hex("s3cret", body));
        let h = headers(&[("x-webhook-signature", &good), ("x-webhook-id", "d-1")]);
        assert_eq!(w.verify("acme", "s3cret", &h, body), Ok(()));
        let read = w.read(&h, body).unwrap();
        let hash = format!("sha256:{}", hex::encode(&Sha256::digest(body)[..16]));
        assert_eq!(read, Delivery { delivery_id: hash.clone(), job_id: "bc-1".into(), value: Some("FINISHED".into()) });
        // The delivery id header is not signed: another id on the same signed body is the same
        // delivery (a resend, never a new one that would make the engine poll again).
        let renamed = headers(&[("x-webhook-signature", &good), ("x-webhook-id", "d-2")]);
        assert_eq!(w.read(&renamed, body).unwrap().delivery_id, hash);
        // Another secret, another body, no prefix, no header: each refused.
        assert_eq!(w.verify("acme", "other", &h, body), Err(VerifyError::Invalid));
        assert_eq!(w.verify("acme", "s3cret", &h, br#"{"id":"bc-2"}"#), Err(VerifyError::Invalid));
        let bare = headers(&[("x-webhook-signature", &hmac_hex("s3cret", body))]);
        assert_eq!(w.verify("acme", "s3cret", &bare, body), Err(VerifyError::Invalid));
        assert_eq!(w.verify("acme", "s3cret", &HeaderMap::new(), body), Err(VerifyError::Missing(SIGNATURE_HEADER)));
    }

    #[test]
    fn base64_signatures_and_the_body_hash_as_delivery_id() {
        use base64::Engine;
        let w = webhook("verify = \"hmac\"\nheader = \"X-Sig\"\nencoding = \"base64\"\njob_id = \".job.id\"").unwrap();
        let body = br#"{"job":{"id":"j-9"}}"#;
        let sig = base64::engine::general_purpose::STANDARD.encode(hex::decode(hmac_hex("k", body)).unwrap());
        let h = headers(&[("x-sig", &sig)]);
        assert_eq!(w.verify("acme", "k", &h, body), Ok(()));
        let read = w.read(&h, body).unwrap();
        assert_eq!(read.job_id, "j-9");
        assert!(read.delivery_id.starts_with("sha256:"), "{}", read.delivery_id);
        assert_eq!(read.delivery_id, w.read(&h, body).unwrap().delivery_id, "the same body is the same delivery");
        assert_eq!(read.value, None);
        assert!(w.read(&h, br#"{"job":{}}"#).unwrap_err().contains(".job.id"));
    }

    #[test]
    fn a_secret_header_is_compared_whole_and_its_delivery_is_only_a_hint() {
        let w = webhook("verify = \"header\"\nheader = \"X-Webhook-Auth\"\njob_id = \".transcript_id\"").unwrap();
        assert!(!w.scheme.signs_the_body(), "the header covers no part of the body");
        let body = br#"{"transcript_id":"t-1","status":"completed"}"#;
        assert_eq!(w.verify("acme", "s3cret", &headers(&[("x-webhook-auth", "s3cret")]), body), Ok(()));
        for wrong in ["s3cre", "s3cret ", "S3CRET", "s3cret-and-more"] {
            assert_eq!(w.verify("acme", "s3cret", &headers(&[("x-webhook-auth", wrong)]), body), Err(VerifyError::Invalid), "{wrong:?}");
        }
        assert_eq!(w.verify("acme", "s3cret", &HeaderMap::new(), body), Err(VerifyError::Missing(SECRET_HEADER)));
        assert_eq!(w.read(&headers(&[]), body).unwrap().job_id, "t-1");
        // It names its header, and reads no state: the poll it causes says the state.
        let key = |text: &str| webhook(text).unwrap_err().0;
        assert_eq!(key("verify = \"header\"\njob_id = \".id\""), "webhook.header");
        assert_eq!(key("verify = \"header\"\nheader = \"X-A\"\njob_id = \".id\"\nstate = \".status\""), "webhook.state");
        assert_eq!(key("verify = \"header\"\nheader = \"X-A\"\nprefix = \"v1=\"\njob_id = \".id\""), "webhook.prefix");
    }

    #[test]
    fn standard_webhooks_with_a_whsec_secret() {
        use base64::Engine;
        let w = webhook("verify = \"standard_webhooks\"\njob_id = \".data.id\"\nstate = \".type\"").unwrap();
        let key = b"0123456789abcdef0123456789abcdef";
        let secret = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key));
        let body = br#"{"type":"batch.succeeded","data":{"id":"batches/abc"}}"#;
        let now = chrono::Utc::now().timestamp();
        let signature = standard_webhooks::sign(key, "msg_1", now, body);
        let h = headers(&[("webhook-id", "msg_1"), ("webhook-timestamp", &now.to_string()), ("webhook-signature", &signature)]);
        assert_eq!(w.verify("acme", &secret, &h, body), Ok(()));
        assert_eq!(
            w.read(&h, body).unwrap(),
            Delivery { delivery_id: "msg_1".into(), job_id: "batches/abc".into(), value: Some("batch.succeeded".into()) }
        );
        let old = standard_webhooks::sign(key, "msg_1", now - 3600, body);
        let stale = headers(&[("webhook-id", "msg_1"), ("webhook-timestamp", &(now - 3600).to_string()), ("webhook-signature", &old)]);
        assert_eq!(w.verify("acme", &secret, &stale, body), Err(VerifyError::Expired));
    }

    #[test]
    fn a_url_token_is_compared_whole_and_its_delivery_is_only_a_hint() {
        let w = webhook("verify = \"url_token\"\njob_id = \".id\"").unwrap();
        assert!(w.takes_url_token());
        assert_eq!(w.verify_token("tok-123", "tok-123"), Ok(()));
        for wrong in ["tok-12", "tok-1234", "", "TOK-123"] {
            assert_eq!(w.verify_token("tok-123", wrong), Err(VerifyError::Invalid), "{wrong:?}");
        }
        // Without its token (POST /hooks/NAME): missing, never taken.
        assert_eq!(w.verify("acme", "tok-123", &HeaderMap::new(), b"{}"), Err(VerifyError::Missing(URL_TOKEN)));
        // A signed scheme takes no token at all.
        assert_eq!(webhook(CURSOR_LIKE).unwrap().verify_token("s", "s"), Err(VerifyError::Invalid));
    }

    #[test]
    fn each_refusal_names_its_key() {
        let key = |text: &str| webhook(text).unwrap_err().0;
        assert_eq!(key("verify = \"rot13\"\njob_id = \".id\""), "webhook.verify");
        assert_eq!(key("verify = \"jwt\"\njob_id = \".id\""), "webhook.jwks_url");
        // A JWT proves the platform: without the account's proof, refused with what to write.
        let jwt = "verify = \"jwt\"\njob_id = \".id\"\njwks_url = \"https://p.example/jwks\"\naudience = \"{webhook_url}\"\nissuer = \"https://p.example\"\n";
        let (key_of, problem) = webhook(jwt).unwrap_err();
        assert_eq!(key_of, "webhook.account");
        assert!(problem.contains("account = ") && problem.contains("owner = \"{secret.NAME}\""), "{problem}");
        assert_eq!(key(&format!("{jwt}account = \".body.owner\"\n")), "webhook.owner");
        assert_eq!(key(&format!("{jwt}account = \".body.owner\"\nowner = \"acct-123\"\n")), "webhook.owner", "inline");
        assert_eq!(key(&jwt.replace("https://p.example/jwks", "http://p.example/jwks")), "webhook.jwks_url");
        assert_eq!(key(&jwt.replace("{webhook_url}", "{webhook_url}/x")), "webhook.audience");
        assert_eq!(key("verify = \"hmac\"\nheader = \"X-S\"\njob_id = \".id\"\nissuer = \"x\""), "webhook.issuer");
        let good = webhook(&format!("{jwt}account = \".body.owner\"\nowner = \"{{secret.owner_token}}\"\n")).unwrap();
        let checked = good.jwt().expect("a jwt scheme");
        assert_eq!((checked.header.as_str(), &checked.audience), ("authorization", &super::super::jwt::Audience::WebhookUrl));
        assert_eq!(key("verify = \"hmac\"\njob_id = \".id\""), "webhook.header");
        assert_eq!(key("verify = \"hmac\"\nheader = \"X-S\"\nencoding = \"hex64\"\njob_id = \".id\""), "webhook.encoding");
        assert_eq!(key("verify = \"url_token\"\nprefix = \"sha256=\"\njob_id = \".id\""), "webhook.prefix");
        assert_eq!(key("verify = \"url_token\"\njob_id = \".id\"\nstate = \".status\""), "webhook.state");
        assert_eq!(key("verify = \"url_token\"\njob_id = \".id | \""), "webhook.job_id");
        assert_eq!(
            key("verify = \"url_token\"\njob_id = \".id\"\ndelivery_id = \".a\"\ndelivery_id_header = \"X-A\""),
            "webhook.delivery_id"
        );
    }
}
