//! A recipe read and checked: what a good one gives, and one refusal per rule, each naming the
//! file and the key.

use serde_json::json;

use super::*;

/// A complete recipe for an API NeverMiss has never seen, in twenty lines.
const TOGETHER_LIKE: &str = r#"
name = "acme-batch"
ids = ["ab-"]
base_url = "https://api.acme.example"

[poll]
url = "{base_url}/v1/batches/{job_id}"
headers = { Authorization = "Bearer {api_key}" }

[read]
state = ".status"
error = ".error.message // empty"
created_at = ".created_at"
finished_at = ".completed_at"
result_urls = "[.output_file_url // empty]"

[states]
VALIDATING = "queued"
IN_PROGRESS = "running"
COMPLETED = "succeeded"
FAILED = "failed"
CANCELLED = "canceled"
"#;

fn refusal(text: &str) -> RecipeError {
    Recipe::parse("acme.toml", text).expect_err("the recipe is refused")
}

fn with(from: &str, to: &str) -> String {
    assert!(TOGETHER_LIKE.contains(from), "{from}");
    TOGETHER_LIKE.replacen(from, to, 1)
}

#[test]
fn a_recipe_reads_an_answer_into_an_event() {
    let recipe = Recipe::parse("acme.toml", TOGETHER_LIKE).unwrap();
    assert!(recipe.owns("ab-123") && !recipe.owns("xy-123"));
    let secret = |name: Option<&str>| if name.is_none() { Some("k-1".to_owned()) } else { None };
    assert_eq!(recipe.poll.url.fill(&recipe.base_url, "ab-1/2", &secret).unwrap(), "https://api.acme.example/v1/batches/ab-1%2F2");
    assert_eq!(recipe.poll.headers[0].1.fill(&recipe.base_url, "ab-1", &secret).unwrap(), "Bearer k-1");

    let done = json!({"status": "COMPLETED", "created_at": 1_764_000_000, "completed_at": "2026-12-03T10:00:00Z",
                      "output_file_url": "https://files.acme.example/out.jsonl"});
    let read = recipe.read_answer("ab-1", done.to_string().as_bytes(), 7).unwrap();
    assert_eq!(read.unknown, None);
    assert_eq!(read.event.state, JobState::Succeeded);
    assert_eq!(read.event.started_at, Some(1_764_000_000_000), "seconds are read as seconds");
    assert_eq!(read.event.finished_at, crate::job::parse_rfc3339("2026-12-03T10:00:00Z"));
    assert_eq!(read.event.result.as_ref().map(|r| r.urls.clone()), Some(vec!["https://files.acme.example/out.jsonl".to_owned()]));

    let failed = json!({"status": "FAILED", "error": {"message": "quota"}});
    let read = recipe.read_answer("ab-2", failed.to_string().as_bytes(), 1).unwrap();
    assert_eq!((read.event.state, read.event.error.as_deref()), (JobState::Failed, Some("quota")));

    // A value the table does not have is never a success: it stays running and is counted.
    let odd = json!({"status": "FINALIZING"});
    let read = recipe.read_answer("ab-3", odd.to_string().as_bytes(), 1).unwrap();
    assert_eq!((read.event.state, read.unknown.as_deref()), (JobState::Running, Some("FINALIZING")));

    // An answer the expressions cannot read is a poll error, never a state.
    assert!(recipe.read_answer("ab-4", b"[1, 2]", 1).is_err());
    assert!(recipe.read_answer("ab-4", b"<html>", 1).is_err());
}

#[test]
fn each_refusal_names_the_file_and_the_key_and_says_what_to_write() {
    let cases: &[(String, &str, &str)] = &[
        (with("[read]", "colour = \"blue\"\n[read]"), "colour", "unknown field"),
        (with("state = \".status\"", "state = \".status |\""), "read.state", "parse"),
        (with("IN_PROGRESS = \"running\"", "IN_PROGRESS = \"busy\""), "states.IN_PROGRESS", "not a state"),
        (
            TOGETHER_LIKE
                .replace("COMPLETED = \"succeeded\"\n", "")
                .replace("FAILED = \"failed\"\n", "")
                .replace("CANCELLED = \"canceled\"\n", ""),
            "states",
            "no value to an end",
        ),
        (with("Bearer {api_key}", "Bearer sk-live-1234"), "poll.headers.Authorization", "{api_key}"),
        (with("https://api.acme.example", "http://api.acme.example"), "base_url", "https://"),
        (with("{base_url}/v1/batches/{job_id}", "{base_url}/v1/batches/{job_id}?key={api_key}"), "poll.url", "header"),
        (with("{base_url}/v1/batches/{job_id}", "{base_url}/v1/{jobid}"), "poll.url", "{job_id}"),
        (with("name = \"acme-batch\"", "name = \"replicate\""), "name", "built-in"),
        (with("name = \"acme-batch\"", "name = \"Acme Batch\""), "name", "lower-case"),
        (with("[states]", "[states]\nwhen_unknown = \"succeeded\""), "states.when_unknown", "never a success"),
        (with("state = \".status\"", "state = \"[range(1e9)]\""), "read.state", "may not"),
        (with("[read]", "not_found = \"ended_unknown\"\n[read]"), "poll.not_found", "unknown_job"),
    ];
    for (text, key, says) in cases {
        let error = refusal(text);
        assert_eq!(error.file, "acme.toml");
        assert_eq!(&error.key, key, "{error}");
        assert!(error.problem.contains(says), "{key}: {error}");
        assert!(!error.to_string().contains('\n'), "one line: {error}");
    }
}

#[test]
fn a_poll_url_on_another_machine_must_be_https_and_loopback_may_be_http() {
    assert!(Recipe::parse("a.toml", &with("https://api.acme.example", "http://127.0.0.1:9")).is_ok());
    assert!(Recipe::parse("a.toml", &with("{base_url}/v1/batches/{job_id}", "https://other.example/v1/{job_id}")).is_ok());
    assert_eq!(refusal(&with("{base_url}/v1/batches/{job_id}", "http://other.example/v1/{job_id}")).key, "poll.url");
}

#[test]
fn times_are_read_in_seconds_milliseconds_or_rfc_3339() {
    assert_eq!(time_ms(&json!(1_764_000_000)), Some(1_764_000_000_000));
    assert_eq!(time_ms(&json!(1_764_000_000_123_i64)), Some(1_764_000_000_123));
    assert_eq!(time_ms(&json!(1_764_000_000.5)), Some(1_764_000_000_500));
    assert_eq!(time_ms(&json!("2026-12-03T10:00:00Z")), crate::job::parse_rfc3339("2026-12-03T10:00:00Z"));
    assert_eq!(time_ms(&json!("1764000000")), Some(1_764_000_000_000));
    assert_eq!(time_ms(&json!("yesterday")), None);
    assert_eq!(time_ms(&json!(true)), None);
}
