//! What counts as a credential wherever NeverMiss keeps something it was sent (a refused
//! request's body, a job result's links), and what stands for it once masked.

/// Names of fields and parameters whose values are masked wherever kept.
const CREDENTIAL_WORDS: &[&str] =
    &["secret", "token", "password", "passwd", "api_key", "apikey", "authorization", "credential", "private_key"];

/// What stands for a masked value.
pub const MASK: &str = "••••";

/// Whether a field or parameter name says its value is a credential (masked wherever kept): it
/// holds one of the words, in any ASCII case, a `-` read as `_` (`Api-Key` as `api_key`). Read in
/// place, without a lowered copy: every header of every delivery is asked (`receiver`).
pub fn names_a_credential(name: &str) -> bool {
    let folded = |b: &u8| if *b == b'-' { b'_' } else { b.to_ascii_lowercase() };
    let name = name.as_bytes();
    CREDENTIAL_WORDS.iter().any(|word| name.windows(word.len()).any(|part| part.iter().map(folded).eq(word.bytes())))
}

#[cfg(test)]
mod tests {
    use super::names_a_credential;

    #[test]
    fn a_credential_is_named_in_any_case_with_hyphens_or_underscores() {
        for name in ["token", "X-Auth-Token", "API_KEY", "Api-Key", "x-goog-api-key", "client_secret", "Private-Key", "PASSWD"] {
            assert!(names_a_credential(name), "{name}");
        }
        for name in ["", "tok", "state", "api", "key", "x-request-id", "content-type", "apike", "pass_word"] {
            assert!(!names_a_credential(name), "{name}");
        }
    }
}
