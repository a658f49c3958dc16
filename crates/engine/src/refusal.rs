//! Why the receiver refused a request, in words a user can act on: the kept copy of a refused
//! request (headers and body with credentials masked) and its likely cause: a clock off by how
//! much, a secret in the wrong format, a missing header (and whose headers it has instead), a
//! body changed on the way. Each refusal is kept through the store's batched writer, trimmed to
//! `store::refused::KEPT` in the same write (`merge_point::record_refused`).

use axum::http::HeaderMap;

use crate::providers::standard_webhooks::{self, SecretFormat};
use crate::providers::{fal, VerifyError};
use crate::store::refused::{NewRefusal, RefusalKind};

/// Most bytes of a refused request's body kept (a forged flood of large bodies stays small).
pub const KEPT_BODY: usize = 16 * 1024;

/// A request refused because no provider has that name.
pub fn unknown_provider(name: &str, known: &[&str], headers: &HeaderMap, body: &[u8], error: &str) -> NewRefusal {
    let cause = format!(
        "no provider is named {name:?}: the webhook URL is mistyped or from another tool (the hooks are /hooks/{}){}",
        known.join(", /hooks/"),
        whose_headers(headers, name).map(|h| format!("; {h}")).unwrap_or_default()
    );
    kept(name, 404, RefusalKind::UnknownProvider, error, cause, headers, body)
}

/// A request whose signature was not accepted. `secret` is the provider's webhook secret in
/// force and `format` how the provider reads it (Standard Webhooks providers), to tell a secret
/// in the wrong format from a wrong one.
pub fn unverified(
    provider: &str,
    status: u16,
    e: &VerifyError,
    secret: Option<&str>,
    format: Option<SecretFormat>,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: i64,
) -> NewRefusal {
    let (kind, cause) = match e {
        VerifyError::Missing(header) => (
            RefusalKind::MissingHeader,
            format!(
                "the request has no {header} header: it was not signed by {provider}, or a proxy on the way dropped the header{}",
                whose_headers(headers, provider).map(|h| format!("; {h}")).unwrap_or_default()
            ),
        ),
        VerifyError::Expired => (RefusalKind::Expired, clock_skew(headers, now_secs)),
        VerifyError::Invalid => (RefusalKind::BadSignature, bad_signature(provider, secret, format, headers, body)),
        VerifyError::NotConfigured(_) => (
            RefusalKind::NotConfigured,
            format!("no webhook secret is set for {provider}: set it in Settings (the sender was answered 503 and retries)"),
        ),
        VerifyError::BadSecret { reason, .. } => (
            RefusalKind::BadSecret,
            format!(
                "the webhook secret set for {provider} is in a form {provider} does not use ({reason}): set it again exactly as {provider} shows it (the sender was answered 503 and retries)"
            ),
        ),
        VerifyError::ForeignAccount(cause) => (RefusalKind::ForeignAccount, cause.clone()),
        VerifyError::Unavailable(reason) => (
            RefusalKind::Unverifiable,
            format!("the keys to verify {provider}'s signature could not be had ({reason}): the sender was answered 503 and retries"),
        ),
    };
    kept(provider, status, kind, &e.to_string(), cause, headers, body)
}

/// A request signed by the platform for an account that is not the owner's (`owner_account`).
pub fn foreign_account(provider: &str, cause: String, headers: &HeaderMap, body: &[u8]) -> NewRefusal {
    kept(provider, 401, RefusalKind::ForeignAccount, "not sent for this NeverMiss's account", cause, headers, body)
}

fn kept(provider: &str, status: u16, kind: RefusalKind, error: &str, cause: String, headers: &HeaderMap, body: &[u8]) -> NewRefusal {
    let raw = crate::kept_request::masked_request(headers, body, KEPT_BODY);
    NewRefusal {
        provider: provider.chars().take(100).collect(),
        status,
        kind,
        error: error.to_owned(),
        cause,
        headers_json: raw.headers_json,
        body: raw.body,
        body_length: body.len(),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// Whose signature headers a request carries, when they are not `provider`'s own.
fn whose_headers(headers: &HeaderMap, provider: &str) -> Option<String> {
    let standard = ["replicate", "openai", "anthropic"];
    if headers.contains_key(standard_webhooks::SIGNATURE_HEADER) && !standard.contains(&provider) {
        return Some(
            "it carries Standard Webhooks headers (webhook-signature): a Replicate, OpenAI or Anthropic webhook sent to the wrong URL?"
                .into(),
        );
    }
    if headers.contains_key(fal::SIGNATURE_HEADER) && provider != fal::NAME {
        return Some("it carries fal's headers (X-Fal-Webhook-Signature): a fal webhook sent to the wrong URL (/hooks/fal)?".into());
    }
    if headers.contains_key("x-agent-signature") && provider != "generic" {
        return Some("it carries X-Agent-Signature: your own sender's request sent to the wrong URL (/hooks/generic)?".into());
    }
    None
}

/// How far the signed timestamp is from now, in words.
fn clock_skew(headers: &HeaderMap, now_secs: i64) -> String {
    let stamp = header(headers, standard_webhooks::TIMESTAMP_HEADER)
        .or_else(|| header(headers, fal::TIMESTAMP_HEADER))
        .and_then(|v| v.parse::<i64>().ok());
    let Some(stamp) = stamp else {
        return "the signed timestamp is more than 5 minutes from this machine's clock".into();
    };
    let skew = now_secs.saturating_sub(stamp);
    let by = duration_words(skew.unsigned_abs());
    if skew > 0 {
        format!(
            "the signed timestamp is {by} in the past (the tolerance is 5 minutes): this machine's clock is ahead of the sender's by about {by}, or this is a replay of an old request (a retry is signed anew)"
        )
    } else {
        format!(
            "the signed timestamp is {by} in the future (the tolerance is 5 minutes): this machine's clock is behind the sender's by about {by}; check that it is set by the network (NTP)"
        )
    }
}

/// `3 h 12 min`, `7 min 5 s`, `42 s`.
fn duration_words(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

fn bad_signature(provider: &str, secret: Option<&str>, format: Option<SecretFormat>, headers: &HeaderMap, body: &[u8]) -> String {
    // A body changed on the way: the signature is over the bytes the sender sent.
    if let Some(encoding) = header(headers, "content-encoding").filter(|e| !e.eq_ignore_ascii_case("identity")) {
        return format!(
            "the body arrived with Content-Encoding: {encoding}: a proxy on the way may have re-encoded it, and the signature is over the bytes the sender sent"
        );
    }
    if let Some(declared) = header(headers, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        if declared != body.len() {
            return format!(
                "the body is {} bytes but Content-Length says {declared}: a proxy on the way changed it, and the signature is over the bytes the sender sent",
                body.len()
            );
        }
    }
    if let (Some(secret), Some(format)) = (secret, format) {
        if let Some(how) = matching_reading(secret, format, headers, body) {
            return format!(
                "the webhook secret is right but in the wrong form: the signature matches it read as {how}, and {provider} reads it as {}; set it exactly as {provider} shows it (with its whsec_ prefix)",
                format.describe()
            );
        }
        if let Some(signatures) = header(headers, standard_webhooks::SIGNATURE_HEADER) {
            if !signatures.split(' ').any(|s| s.starts_with("v1,") && s.len() > 3) {
                return "the webhook-signature header has no v1 (HMAC) signature: the sender signs in another scheme".into();
            }
        }
    }
    format!(
        "the signature does not match the webhook secret set for {provider}: the secret is wrong or out of date (rotated in {provider}'s dashboard?), a proxy changed the body on the way, or the request is forged"
    )
}

/// How the secret must be read for the request's Standard Webhooks signature to match, when a
/// reading other than the provider's own does.
fn matching_reading(secret: &str, format: SecretFormat, headers: &HeaderMap, body: &[u8]) -> Option<&'static str> {
    let id = header(headers, standard_webhooks::ID_HEADER)?;
    let stamp: i64 = header(headers, standard_webhooks::TIMESTAMP_HEADER)?.parse().ok()?;
    let signatures = header(headers, standard_webhooks::SIGNATURE_HEADER)?;
    format
        .other_readings(secret)
        .into_iter()
        .find(|(_, key)| standard_webhooks::verify_signatures(key, id, stamp, body, signatures).is_ok())
        .map(|(how, _)| how)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_words() {
        assert_eq!(duration_words(42), "42 s");
        assert_eq!(duration_words(7 * 60 + 5), "7 min 5 s");
        assert_eq!(duration_words(3 * 3600 + 12 * 60 + 9), "3 h 12 min");
        assert_eq!(duration_words(2 * 86_400 + 3600), "2 d 1 h");
    }

    #[test]
    fn a_secret_in_the_wrong_form_is_named() {
        // OpenAI reads an unprefixed secret as its own bytes; the sender signed with the decoded key.
        let encoded = "C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
        let key = SecretFormat::Base64.key(encoded).unwrap();
        let body = b"{}";
        let mut headers = HeaderMap::new();
        headers.insert(standard_webhooks::ID_HEADER, "msg_1".parse().unwrap());
        headers.insert(standard_webhooks::TIMESTAMP_HEADER, "1700000000".parse().unwrap());
        headers.insert(standard_webhooks::SIGNATURE_HEADER, standard_webhooks::sign(&key, "msg_1", 1_700_000_000, body).parse().unwrap());
        let cause = bad_signature("openai", Some(encoded), Some(SecretFormat::PrefixedBase64OrRaw), &headers, body);
        assert!(cause.contains("wrong form") && cause.contains("base64 decoded"), "{cause}");
        let cause = bad_signature(
            "openai",
            Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            Some(SecretFormat::PrefixedBase64OrRaw),
            &headers,
            body,
        );
        assert!(cause.contains("does not match"), "{cause}");
    }
}
