//! What counts as a credential wherever NeverMiss keeps something it was sent (a delivery's or a
//! refused request's headers and body, a job result's links), by its name or by its shape, and
//! what stands for it once masked.

/// Names of fields and parameters whose values are masked wherever kept.
const CREDENTIAL_WORDS: &[&str] =
    &["secret", "token", "password", "passwd", "api_key", "apikey", "authorization", "credential", "private_key"];

/// What stands for a masked value.
pub const MASK: &str = "••••";

/// Whether a field or parameter name says its value is a credential (masked wherever kept): it
/// holds one of the words, in any ASCII case, a `-` read as `_` (`Api-Key` as `api_key`), or it
/// has the word `key` between its separators (`X-Key`, `X-Access-Key`,
/// `Ocp-Apim-Subscription-Key`, `access_key`). Read in place, without a lowered copy: every header
/// of every delivery is asked (`receiver`).
pub fn names_a_credential(name: &str) -> bool {
    let folded = |b: &u8| if *b == b'-' { b'_' } else { b.to_ascii_lowercase() };
    let bytes = name.as_bytes();
    CREDENTIAL_WORDS.iter().any(|word| bytes.windows(word.len()).any(|part| part.iter().map(folded).eq(word.bytes())))
        || name.split(['-', '_', '.', ' ']).any(|piece| piece.eq_ignore_ascii_case("key") || piece.eq_ignore_ascii_case("keys"))
}

/// Prefixes of API keys and secrets as providers hand them out.
const KEY_PREFIXES: &[&str] =
    &["sk-", "sk_", "rk_", "r8_", "whsec_", "hf_", "gsk_", "fw_", "rpa_", "xoxb-", "xoxp-", "ghp_", "github_pat_", "glpat-", "AIza"];

/// Whether a value looks like a credential whatever it is named: an authorization scheme and its
/// token (`Bearer ...`, `Basic ...`, `Key ...`), a JWT (three base64url parts, the first a JSON
/// header), or a key of a form providers hand out (`sk-...`, `r8_...`, `whsec_...`: a known
/// prefix and at least 8 more characters of a token, nothing else).
pub fn looks_like_a_credential(value: &str) -> bool {
    let value = value.trim();
    let token_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+' | '/' | '=' | ':');
    let is_token = |t: &str| t.len() >= 16 && t.chars().all(token_char);
    if let Some((scheme, rest)) = value.split_once(' ') {
        let scheme = scheme.to_ascii_lowercase();
        return matches!(scheme.as_str(), "bearer" | "basic" | "token" | "key" | "apikey") && is_token(rest.trim());
    }
    let base64url = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '='));
    let parts: Vec<&str> = value.split('.').collect();
    if parts.len() == 3
        && value.starts_with("eyJ")
        && base64url(parts[0])
        && base64url(parts[1])
        && parts[2].chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '='))
    {
        return true;
    }
    let is_key = |t: &str| t.len() >= 8 && t.chars().all(token_char);
    KEY_PREFIXES.iter().any(|prefix| value.strip_prefix(prefix).is_some_and(is_key))
}

/// A kept body with its credentials masked: in JSON, the values of fields named like credentials
/// (`names_a_credential`) and every string that looks like one (`looks_like_a_credential`); in a
/// form (`a=1&api_key=...`), the same by parameter. Any other body as it is. A body that holds
/// none of what could be masked is not parsed at all (every kept delivery passes here).
pub fn mask_body(body: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow;
    if !might_hold_a_credential(body) {
        return Cow::Borrowed(body);
    }
    if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) {
        return if mask_json(&mut value) { Cow::Owned(serde_json::to_vec(&value).unwrap_or_default()) } else { Cow::Borrowed(body) };
    }
    match std::str::from_utf8(body) {
        Ok(text) if is_form(text) => {
            let mut changed = false;
            let masked: Vec<String> = text
                .split('&')
                .map(|pair| {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    let decoded = percent_decoded(value);
                    if names_a_credential(&percent_decoded(name)) || looks_like_a_credential(&decoded) {
                        changed = true;
                        format!("{name}={MASK}")
                    } else {
                        pair.to_owned()
                    }
                })
                .collect();
            if changed {
                Cow::Owned(masked.join("&").into_bytes())
            } else {
                Cow::Borrowed(body)
            }
        }
        _ => Cow::Borrowed(body),
    }
}

fn mask_json(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    let mut changed = false;
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if names_a_credential(key) && !v.is_object() && !v.is_array() && !v.is_null() {
                    *v = Value::String(MASK.into());
                    changed = true;
                } else {
                    changed |= mask_json(v);
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                changed |= mask_json(v);
            }
        }
        Value::String(text) if looks_like_a_credential(text) => {
            *text = MASK.into();
            changed = true;
        }
        _ => {}
    }
    changed
}

/// Whether `body` holds any word or prefix the masking looks for, in any ASCII case: one pass.
fn might_hold_a_credential(body: &[u8]) -> bool {
    static SIGNS: std::sync::LazyLock<aho_corasick::AhoCorasick> = std::sync::LazyLock::new(|| {
        let words = CREDENTIAL_WORDS.iter().chain(KEY_PREFIXES).chain(&["key", "bearer", "basic", "eyj", "xox"]);
        aho_corasick::AhoCorasick::builder().ascii_case_insensitive(true).build(words).expect("fixed words build")
    });
    SIGNS.is_match(body)
}

/// Whether `text` reads as `application/x-www-form-urlencoded`: `name=value` pairs joined by `&`.
fn is_form(text: &str) -> bool {
    !text.is_empty()
        && text.split('&').all(|pair| {
            pair.split_once('=').is_some_and(|(name, _)| !name.is_empty())
                && pair.chars().all(|c| c.is_ascii_graphic() && c != '{' && c != '"')
        })
}

fn percent_decoded(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(high), Some(low)) => {
                out.push(high * 16 + low);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_is_named_in_any_case_with_hyphens_or_underscores() {
        for name in [
            "token",
            "X-Auth-Token",
            "API_KEY",
            "Api-Key",
            "x-goog-api-key",
            "client_secret",
            "Private-Key",
            "PASSWD",
            "X-Access-Key",
            "Ocp-Apim-Subscription-Key",
            "X-Key",
            "access_key",
            "key",
        ] {
            assert!(names_a_credential(name), "{name}");
        }
        for name in ["", "tok", "state", "api", "monkey", "keyboard", "x-request-id", "content-type", "apike", "pass_word"] {
            assert!(!names_a_credential(name), "{name}");
        }
    }

    #[test]
    fn a_credential_is_known_by_its_shape_whatever_its_name() {
        let jwt = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJ4In0.c2lnbmF0dXJlLXNpZ25hdHVyZQ";
        for value in [
            jwt,
            "Bearer r8_abcdefghijklmnopqrstu",
            "sk-proj-abcdefghijklmnop1234",
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "Key 0a9b8c7d-6e5f:0123456789abcdef",
        ] {
            assert!(looks_like_a_credential(value), "{value}");
        }
        for value in
            ["succeeded", "sk-1", "render gamma 1234", "https://x.example/out.png", "Bearer", "a.b.c", "batches/abc", "bc-3a1b9c00-0000"]
        {
            assert!(!looks_like_a_credential(value), "{value}");
        }
    }

    #[test]
    fn a_kept_body_is_masked_by_name_and_by_shape_in_json_and_in_forms() {
        let json = br#"{"id":"x","api_key":"k-1","nested":[{"Token":"t-1","n":1}],"note":"sk-proj-abcdefghijklmnop1234","password":null}"#;
        let masked = String::from_utf8(mask_body(json).into_owned()).unwrap();
        assert!(!masked.contains("k-1") && !masked.contains("t-1") && !masked.contains("sk-proj"), "{masked}");
        assert!(masked.contains("\"id\":\"x\""), "{masked}");
        let form = b"id=job-1&X-Access-Key=abc123&note=Bearer%20r8_abcdefghijklmnopqrstu&state=done";
        let masked = String::from_utf8(mask_body(form).into_owned()).unwrap();
        assert_eq!(masked, format!("id=job-1&X-Access-Key={MASK}&note={MASK}&state=done"));
        assert!(matches!(mask_body(b"not json"), std::borrow::Cow::Borrowed(_)));
        let plain = br#"{"id":"x","status":"succeeded"}"#;
        assert!(matches!(mask_body(plain), std::borrow::Cow::Borrowed(_)), "nothing to mask: not parsed, not copied");
    }
}
