//! What a job id may be: a name, never a place. Every id is put into a provider's URLs (one path
//! segment, or pieces between `/`), where a `.` or `..` piece would climb the API's path (URL
//! parsers remove dot segments, percent-encoded ones too) and send the owner's key to another
//! endpoint. Checked when a job is tracked, pushed or discovered, and again before every call that
//! puts an id into a URL.

/// Longest job id kept.
pub const MAX_LEN: usize = 512;

/// Whether `job_id` is a name: 1 to `MAX_LEN` bytes, no control character, and no piece between
/// `/` that is empty, `.` or `..`. The error says what ids look like.
pub fn is_a_name(job_id: &str) -> Result<(), String> {
    if job_id.is_empty() || job_id.len() > MAX_LEN {
        return Err(format!("a job id is 1 to {MAX_LEN} characters"));
    }
    if job_id.chars().any(char::is_control) {
        return Err("a job id has no control characters".into());
    }
    if job_id.split('/').any(|piece| piece.is_empty() || piece == "." || piece == "..") {
        return Err(format!(
            "{job_id:?} is not a job id: an id is a name such as `abc123` or `batches/abc123`, never `.` or `..` nor a `/` \
             with nothing, `.` or `..` beside it"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_a_name;

    #[test]
    fn names_pass_and_places_are_refused() {
        for name in ["abc123", "ep1/job-1", "batches/abc", "resp_68a.9", "a.b", "...", ".hidden", "x..y", "ü"] {
            assert_eq!(is_a_name(name), Ok(()), "{name}");
        }
        for place in ["", ".", "..", "../whoami-v2", "a/..", "a/./b", "/a", "a/", "a//b", "a\nb", &"x".repeat(513)] {
            assert!(is_a_name(place).is_err(), "{place:?}");
        }
    }
}
