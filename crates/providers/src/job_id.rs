//! What a job id may be: a name, never a place. Every id is put into a provider's URLs (one path
//! segment, or pieces between `/`), where a `.` or `..` piece would climb the API's path (URL
//! parsers remove dot segments, percent-encoded ones too) and send the owner's key to another
//! endpoint. Checked when a job is tracked, pushed or discovered, and again before every call that
//! puts an id into a URL.

/// Longest job id kept.
pub const MAX_LEN: usize = 512;

/// Why a job id is not a name; each says what ids look like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAName {
    #[error("a job id is 1 to {MAX_LEN} characters")]
    Length,
    #[error("a job id has no control characters")]
    Control,
    #[error(
        "{0:?} is not a job id: an id is a name such as `abc123` or `batches/abc123`, never `.` or `..` nor a `/` with nothing, `.` or `..` beside it"
    )]
    Place(String),
}

/// Whether `job_id` is a name: 1 to `MAX_LEN` bytes, no control character, and no piece between
/// `/` that is empty, `.` or `..`.
pub fn is_a_name(job_id: &str) -> Result<(), NotAName> {
    if job_id.is_empty() || job_id.len() > MAX_LEN {
        return Err(NotAName::Length);
    }
    if job_id.chars().any(char::is_control) {
        return Err(NotAName::Control);
    }
    if job_id.split('/').any(|piece| piece.is_empty() || piece == "." || piece == "..") {
        return Err(NotAName::Place(job_id.to_owned()));
    }
    Ok(())
}

/// Whether every character of `job_id` is an ASCII letter or digit or one of `also`: the ids a
/// cloud hands out are such tokens, so a space or a typed word in another script is a typo.
pub fn is_a_token(job_id: &str, also: &[char]) -> bool {
    !job_id.is_empty() && job_id.chars().all(|c| c.is_ascii_alphanumeric() || also.contains(&c))
}

#[cfg(test)]
mod tests {
    use super::{is_a_name, is_a_token, NotAName};

    #[test]
    fn tokens_are_letters_digits_and_the_given_marks() {
        assert!(is_a_token("gm3qorzdhgbfurvjtvhg6dckhu", &['-', '_']));
        assert!(is_a_token("resp_68a.9", &['-', '_', '.']));
        for typo in ["", "bad id", "abc\t", "prédiction", "a/b"] {
            assert!(!is_a_token(typo, &['-', '_', '.']), "{typo:?}");
        }
    }

    #[test]
    fn names_pass_and_places_are_refused() {
        for name in ["abc123", "ep1/job-1", "batches/abc", "resp_68a.9", "a.b", "...", ".hidden", "x..y", "ü"] {
            assert_eq!(is_a_name(name), Ok(()), "{name}");
        }
        for place in ["", ".", "..", "../whoami-v2", "a/..", "a/./b", "/a", "a/", "a//b", "a\nb", &"x".repeat(513)] {
            assert!(is_a_name(place).is_err(), "{place:?}");
        }
        assert_eq!(is_a_name("a\nb"), Err(NotAName::Control));
        assert_eq!(is_a_name(""), Err(NotAName::Length));
        let place = is_a_name("a/..").unwrap_err().to_string();
        assert!(place.starts_with("\"a/..\" is not a job id: an id is a name such as `abc123`"), "{place}");
    }
}
