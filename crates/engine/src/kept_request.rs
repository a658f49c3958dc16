//! A request as kept for inspection (a delivery, a refused request): its headers as JSON and its
//! body, credentials masked (by name and by shape: `providers::masking`), each part capped.

use axum::http::HeaderMap;

use crate::providers::masking::{names_a_credential, MASK};
use crate::store::deliveries::RawRequest;

/// Headers whose values are never stored.
const MASKED_HEADERS: &[&str] = &["authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"];

/// The request as kept for inspection: headers as JSON and the body, credentials masked (by name
/// and by shape: `providers::masking`), the body capped.
pub fn masked_request(headers: &HeaderMap, body: &[u8], cap: usize) -> RawRequest {
    let mut map = serde_json::Map::new();
    let mut kept = 0usize;
    let mut left_out = 0usize;
    for (name, value) in headers {
        let text = String::from_utf8_lossy(value.as_bytes());
        let value = if is_credential_header(name.as_str()) || crate::providers::masking::looks_like_a_credential(&text) {
            MASK.to_owned()
        } else {
            capped(&text, KEPT_HEADER_VALUE)
        };
        if kept + name.as_str().len() + value.len() > KEPT_HEADERS {
            left_out += 1;
            continue;
        }
        kept += name.as_str().len() + value.len();
        match map.get_mut(name.as_str()) {
            Some(serde_json::Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            _ => {
                map.insert(name.as_str().to_owned(), serde_json::Value::String(value));
            }
        }
    }
    if left_out > 0 {
        map.insert("(not kept)".to_owned(), serde_json::Value::String(format!("{left_out} more headers, past {KEPT_HEADERS} bytes")));
    }
    // Masked whole, then capped: a cut JSON body would no longer read as one.
    let body = crate::providers::masking::mask_body(body);
    RawRequest {
        headers_json: serde_json::Value::Object(map).to_string(),
        body: body[..body.len().min(cap)].to_vec(),
        body_truncated: body.len() > cap,
    }
}

/// Most bytes of one header's value kept with a request, and of all its headers together.
pub const KEPT_HEADER_VALUE: usize = 1024;
pub const KEPT_HEADERS: usize = 16 * 1024;

/// Whether a header's value is a credential, never kept: the usual ones, and any whose name says
/// so by the rule that masks a body's fields (`X-Goog-Api-Key`, `X-Auth-Token`, `Api-Key`).
pub fn is_credential_header(name: &str) -> bool {
    MASKED_HEADERS.iter().any(|masked| masked.eq_ignore_ascii_case(name)) || names_a_credential(name)
}

/// At most `max` bytes of `text` (cut on a character boundary), saying how long it was.
fn capped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} bytes)", &text[..cut], text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_masked_by_name_and_long_ones_are_capped() {
        let mut headers = HeaderMap::new();
        for name in
            ["authorization", "cookie", "x-goog-api-key", "x-auth-token", "api-key", "x-api-key", "proxy-authorization", "set-cookie"]
        {
            headers.insert(axum::http::HeaderName::from_static(name), "s3cr3t-value".parse().unwrap());
        }
        headers.insert("webhook-signature", "v1,abc".parse().unwrap());
        headers.insert("x-long", "a".repeat(300_000).parse().unwrap());
        let raw = masked_request(&headers, b"{}", 10);
        assert!(!raw.headers_json.contains("s3cr3t"), "{}", raw.headers_json);
        assert!(raw.headers_json.contains("v1,abc"), "a signature is not a credential: {}", raw.headers_json);
        assert!(raw.headers_json.len() < KEPT_HEADERS + 1024, "{} bytes kept", raw.headers_json.len());
        assert!(raw.headers_json.contains("(300000 bytes)"));
        // Past the total, headers are left out and counted.
        let mut many = HeaderMap::new();
        for i in 0..40 {
            many.insert(axum::http::HeaderName::try_from(format!("x-h{i}")).unwrap(), "b".repeat(1000).parse().unwrap());
        }
        let raw = masked_request(&many, b"", 10);
        assert!(raw.headers_json.len() < KEPT_HEADERS + 1024 && raw.headers_json.contains("more headers"), "{}", raw.headers_json.len());
    }
}
