//! What counts as a credential wherever NeverMiss keeps something it was sent (a refused
//! request's body, a job result's links), and what stands for it once masked.

/// Names of fields and parameters whose values are masked wherever kept.
const CREDENTIAL_WORDS: &[&str] =
    &["secret", "token", "password", "passwd", "api_key", "apikey", "authorization", "credential", "private_key"];

/// What stands for a masked value.
pub const MASK: &str = "••••";

/// Whether a field or parameter name says its value is a credential (masked wherever kept).
pub fn names_a_credential(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    CREDENTIAL_WORDS.iter().any(|w| name.contains(w))
}
