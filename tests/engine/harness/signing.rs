//! Every signature a provider puts on a webhook, written independently of the engine's own
//! signers (only `hmac`, `sha2`, `base64`, `ed25519-dalek` from crates.io), so a test proves the
//! wire format rather than the engine agreeing with itself. Each function answers the headers to
//! send.

use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Headers to add to a hook request.
pub type Headers = Vec<(&'static str, String)>;

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

// ----- generic: `X-Agent-Signature: sha256=<hex>` -----

/// `sha256=<lower-case hex of HMAC-SHA256(secret, body)>`.
pub fn generic_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(hmac_sha256(secret.as_bytes(), body)))
}

/// The generic sender's one header.
pub fn generic(secret: &str, body: &[u8]) -> Headers {
    vec![("x-agent-signature", generic_signature(secret, body))]
}

// ----- Standard Webhooks (Replicate, OpenAI, Anthropic) -----

/// The key of a `whsec_<base64>` secret (the raw bytes of a secret without the prefix).
pub fn standard_webhooks_key(secret: &str) -> Vec<u8> {
    match secret.strip_prefix("whsec_") {
        Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64).expect("a whsec_ secret is base64"),
        None => secret.as_bytes().to_vec(),
    }
}

/// `v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
pub fn standard_webhooks_signature(secret: &str, webhook_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut message = format!("{webhook_id}.{timestamp}.").into_bytes();
    message.extend_from_slice(body);
    let mac = hmac_sha256(&standard_webhooks_key(secret), &message);
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac))
}

/// `webhook-id`, `webhook-timestamp`, `webhook-signature`.
pub fn standard_webhooks(secret: &str, webhook_id: &str, timestamp: i64, body: &[u8]) -> Headers {
    vec![
        ("webhook-id", webhook_id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", standard_webhooks_signature(secret, webhook_id, timestamp, body)),
    ]
}

// ----- fal: Ed25519 over `request_id \n user_id \n timestamp \n hex(sha256(body))` -----

/// The user id every fal webhook of the tests carries.
pub const FAL_USER: &str = "user-42";

/// A deterministic test key pair.
pub fn fal_key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// fal's four headers: request id, user id, timestamp and the hex Ed25519 signature.
pub fn fal(key: &SigningKey, request_id: &str, timestamp: i64, body: &[u8]) -> Headers {
    fal_for(key, FAL_USER, request_id, timestamp, body)
}

/// The same, for a request of another fal account (`user`): fal signs every account's webhooks
/// with the same keys.
pub fn fal_for(key: &SigningKey, user: &str, request_id: &str, timestamp: i64, body: &[u8]) -> Headers {
    let digest = hex::encode(Sha256::digest(body));
    let message = format!("{request_id}\n{user}\n{timestamp}\n{digest}");
    let signature = key.sign(message.as_bytes());
    vec![
        ("X-Fal-Webhook-Request-Id", request_id.to_owned()),
        ("X-Fal-Webhook-User-Id", user.to_owned()),
        ("X-Fal-Webhook-Timestamp", timestamp.to_string()),
        ("X-Fal-Webhook-Signature", hex::encode(signature.to_bytes())),
    ]
}

/// A JWKS with these public keys (`kid` = `key-<index>`), as fal serves its key set.
pub fn jwks(keys: &[&SigningKey]) -> Value {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let keys: Vec<Value> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            json!({"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": format!("key-{i}"),
                   "x": b64.encode(k.verifying_key().as_bytes())})
        })
        .collect();
    json!({ "keys": keys })
}

/// Now, in Unix seconds (the timestamp a signature is made at).
pub fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}
