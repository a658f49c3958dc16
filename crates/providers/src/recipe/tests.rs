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

/// `{job_id.path}`: an id that is a resource name (`batches/123`, `models/veo/operations/4`)
/// goes into the URL as a path, each piece encoded; a piece that is empty, `.` or `..` makes the
/// job unpollable (it could climb out of the API's root), never another URL.
#[test]
fn a_job_id_that_is_a_resource_name_is_filled_in_as_a_path() {
    let recipe = Recipe::parse("acme.toml", &with("{base_url}/v1/batches/{job_id}", "{base_url}/v1beta/{job_id.path}")).unwrap();
    let secret = |_: Option<&str>| None;
    let fill = |id: &str| recipe.poll.url.fill(&recipe.base_url, id, &secret);
    assert_eq!(fill("batches/123").unwrap(), "https://api.acme.example/v1beta/batches/123");
    assert_eq!(fill("models/veo-3.0/operations/a b").unwrap(), "https://api.acme.example/v1beta/models/veo-3.0/operations/a%20b");
    assert_eq!(fill("ab-1").unwrap(), "https://api.acme.example/v1beta/ab-1");
    for climbing in ["batches/../admin", "../x", "batches//1", "batches/1/", "/batches/1", ".", "a/./b"] {
        assert!(fill(climbing).unwrap_err().contains("not a path of names"), "{climbing}");
    }
    // `{job_id}` alone keeps the whole id one segment.
    assert!(Recipe::parse("acme.toml", &with("{base_url}/v1/batches/{job_id}", "{base_url}/v1/{job_id.paths}")).is_err());
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

/// Every value of each shipped provider's status as its official SDK declares it (the versions
/// named in each recipe's first lines: groq 1.7.0 `BatchRetrieveResponse.status`, mistralai 3.7.0
/// `BatchJobStatus`, together 3.1.1 `FinetuneResponse.status` and `FinetuneJobStatus`).
const SDK_STATUSES: &[(&str, &[&str])] = &[
    ("groq", &["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"]),
    ("mistral", &["QUEUED", "RUNNING", "SUCCESS", "FAILED", "TIMEOUT_EXCEEDED", "CANCELLATION_REQUESTED", "CANCELLED"]),
    (
        "together",
        &["pending", "queued", "running", "compressing", "uploading", "cancel_requested", "cancelled", "error", "user_error", "completed"],
    ),
];

#[test]
fn every_shipped_recipe_reads_and_maps_every_status_its_sdk_declares_and_no_other() {
    assert_eq!(SHIPPED.len(), SDK_STATUSES.len());
    for (file, text) in SHIPPED {
        let recipe = Recipe::parse_shipped(file, text).unwrap_or_else(|e| panic!("{e}"));
        let (_, statuses) = SDK_STATUSES.iter().find(|(name, _)| *name == recipe.name).expect("the SDK's values of each shipped recipe");
        for status in *statuses {
            assert!(recipe.states.iter().any(|(value, _)| value == status), "{file}: {status} is not mapped");
            // An answer with only its id and status reads (no other field is required).
            let answer = json!({"id": "x", "status": status});
            recipe.read_answer("x", answer.to_string().as_bytes(), 1).unwrap_or_else(|e| panic!("{file} {status}: {e}"));
        }
        for (value, _) in &recipe.states {
            assert!(statuses.contains(&value.as_str()), "{file}: {value} is not a value of the SDK");
        }
        // A user's recipe may not take a shipped provider's name.
        assert_eq!(refusal(&with("name = \"acme-batch\"", &format!("name = \"{}\"", recipe.name))).key, "name");
    }
}

#[test]
fn shipped_recipes_read_their_providers_answers() {
    let recipe = |name: &str| {
        let (file, text) = SHIPPED.iter().find(|(file, _)| file.starts_with(name)).unwrap();
        Recipe::parse_shipped(file, text).unwrap()
    };
    // Groq: a batch as `BatchRetrieveResponse` has it.
    let groq = json!({"id": "batch_01", "object": "batch", "endpoint": "/v1/chat/completions", "input_file_id": "file_1",
                      "completion_window": "24h", "status": "failed", "created_at": 1_764_000_000, "failed_at": 1_764_000_100,
                      "errors": {"object": "list", "data": [{"code": "invalid_json_line", "line": 3, "message": "line 3 is not JSON"}]}});
    let read = recipe("groq").read_answer("batch_01", groq.to_string().as_bytes(), 1).unwrap();
    assert_eq!((read.event.state, read.event.error.as_deref()), (JobState::Failed, Some("line 3 is not JSON")));
    assert_eq!((read.event.started_at, read.event.finished_at), (Some(1_764_000_000_000), Some(1_764_000_100_000)));
    assert_eq!(read.event.kind.as_deref(), Some("groq/batch/v1/chat/completions"));
    // Mistral: a `BatchJob` that ran out of time.
    let mistral = json!({"id": "b6d0", "object": "batch", "input_files": ["f1"], "endpoint": "/v1/chat/completions",
                         "model": "mistral-small-latest", "errors": [{"message": "timeout", "count": 1}], "status": "TIMEOUT_EXCEEDED",
                         "created_at": 1_764_000_000, "total_requests": 10, "completed_requests": 4, "succeeded_requests": 4,
                         "failed_requests": 0, "completed_at": 1_764_086_400});
    let read = recipe("mistral").read_answer("b6d0", mistral.to_string().as_bytes(), 1).unwrap();
    assert_eq!((read.event.state, read.event.error.as_deref()), (JobState::Failed, Some("timeout")));
    assert_eq!(read.event.kind.as_deref(), Some("mistral/batch/mistral-small-latest"));
    // Together: a finished fine-tune names its model.
    let together = json!({"id": "ft-1", "status": "completed", "user_id": "u", "model": "meta-llama/Llama-3-8b",
                          "model_output_name": "me/Llama-3-8b-ft-1", "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T12:00:00Z"});
    let read = recipe("together").read_answer("ft-1", together.to_string().as_bytes(), 1).unwrap();
    assert_eq!(read.event.state, JobState::Succeeded);
    assert_eq!(read.event.result.and_then(|r| r.text).as_deref(), Some("me/Llama-3-8b-ft-1"));
    assert_eq!(read.event.finished_at, crate::job::parse_rfc3339("2026-12-01T12:00:00Z"));
}

/// The README's recipe ("Add any provider") is a valid one of twenty lines or fewer, as shown.
#[test]
fn the_readmes_recipe_is_valid_and_short() {
    let readme = include_str!("../../../../README.md");
    let section = readme.split("### Add any provider").nth(1).expect("the README's section");
    let recipe = section.split("```toml\n").nth(1).and_then(|rest| rest.split("\n```").next()).expect("its recipe");
    let lines = recipe.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(lines <= 20, "the README's recipe has {lines} lines");
    let recipe = Recipe::parse("README.md", recipe).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(recipe.name, "acme");
}
