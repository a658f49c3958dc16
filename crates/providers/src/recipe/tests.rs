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
    let secret = |wanted: super::Wanted<'_>| match wanted {
        super::Wanted::ApiKey => Ok("k-1".to_owned()),
        other => Err(crate::FetchError::NotConfigured(format!("{other:?}"))),
    };
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
    let secret = |_: super::Wanted<'_>| Err(crate::FetchError::NotConfigured("no secret".into()));
    let fill = |id: &str| recipe.poll.url.fill(&recipe.base_url, id, &secret);
    assert_eq!(fill("batches/123").unwrap(), "https://api.acme.example/v1beta/batches/123");
    assert_eq!(fill("models/veo-3.0/operations/a b").unwrap(), "https://api.acme.example/v1beta/models/veo-3.0/operations/a%20b");
    assert_eq!(fill("ab-1").unwrap(), "https://api.acme.example/v1beta/ab-1");
    for climbing in ["batches/../admin", "../x", "batches//1", "batches/1/", "/batches/1", ".", "a/./b"] {
        assert!(fill(climbing).unwrap_err().to_string().contains("not a path of names"), "{climbing}");
    }
    // `{job_id}` alone keeps the whole id one segment.
    assert!(Recipe::parse("acme.toml", &with("{base_url}/v1/batches/{job_id}", "{base_url}/v1/{job_id.paths}")).is_err());
}

/// `poll.urls`: a provider whose kinds of job live at different URLs (Together's fine-tunes and
/// batches) polls each id at the URL of the longest prefix it starts with, any other at `poll.url`;
/// each URL is checked as `poll.url` is, and refused under its own key.
#[test]
fn an_id_is_polled_at_the_url_of_its_prefix() {
    let text = with(
        "headers = ",
        "urls = { \"ab-\" = \"{base_url}/v1/ab/{job_id}\", \"ab-ft-\" = \"{base_url}/v1/fine-tunes/{job_id}\" }\nheaders = ",
    );
    let recipe = Recipe::parse("acme.toml", &text).unwrap();
    let secret = |_: super::Wanted<'_>| Err(crate::FetchError::NotConfigured("no secret".into()));
    let url = |id: &str| recipe.poll.url_for(id).fill(&recipe.base_url, id, &secret).unwrap();
    assert_eq!(url("ab-1"), "https://api.acme.example/v1/ab/ab-1");
    assert_eq!(url("ab-ft-1"), "https://api.acme.example/v1/fine-tunes/ab-ft-1", "the longest prefix wins");
    assert_eq!(url("0f9e-uuid"), "https://api.acme.example/v1/batches/0f9e-uuid", "any other id: poll.url");
    for (written, says) in [
        ("\"ab-\" = \"{base_url}/v1/ab/{job_id}?key={api_key}\"", "header"),
        ("\"ab-\" = \"http://other.example/v1/{job_id}\"", "https://"),
        ("\"ab-\" = \"{base_url}/v1/{jobid}\"", "{job_id}"),
    ] {
        let error = refusal(&with("headers = ", &format!("urls = {{ {written} }}\nheaders = ")));
        assert_eq!(error.key, "poll.urls.ab-", "{error}");
        assert!(error.problem.contains(says), "{error}");
    }
    assert_eq!(refusal(&with("headers = ", "urls = { \" \" = \"{base_url}/x/{job_id}\" }\nheaders = ")).key, "poll.urls. ");
}

#[test]
fn each_refusal_names_the_file_and_the_key_and_says_what_to_write() {
    let cases: &[(String, &str, &str)] = &[
        (with("[read]", "colour = \"blue\"\n[read]"), "poll.colour", "unknown field"),
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
        (with("[read]", "not_found = \"forgotten\"\n[read]"), "poll.not_found", "unknown_job or ended"),
        (with("FAILED = \"failed\"", "FAILED = \"ended\""), "states.FAILED", "poll.not_found"),
    ];
    for (text, key, says) in cases {
        let error = refusal(text);
        assert_eq!(error.file, "acme.toml");
        assert_eq!(&error.key, key, "{error}");
        assert!(error.problem.contains(says), "{key}: {error}");
        assert!(!error.to_string().contains('\n'), "one line: {error}");
        // Where it is written, when it is: the line that sets the key (or its table's header).
        if let Some((line, _)) = error.at {
            let written = text.lines().nth(line - 1).unwrap();
            let last = key.rsplit('.').next().unwrap();
            assert!(written.contains(last) || written.starts_with('['), "{error} points at {written:?}");
        }
    }
    // Every refusal of a key that is written says where.
    let line = TOGETHER_LIKE.lines().position(|l| l.starts_with("IN_PROGRESS")).unwrap() + 1;
    let said = refusal(&with("IN_PROGRESS = \"running\"", "IN_PROGRESS = \"busy\"")).to_string();
    assert!(said.starts_with(&format!("acme.toml:{line}:1: states.IN_PROGRESS: ")), "{said}");
}

#[test]
fn a_file_that_is_not_toml_says_where_without_guessing_a_key() {
    let error = refusal(&with("state = \".status\"", "state = \".status"));
    assert_eq!(error.key, "", "{error}");
    let (line, column) = error.at.expect("a syntax error has a place");
    assert!(TOGETHER_LIKE.lines().nth(line - 1).unwrap().contains("state"), "{error}");
    assert!(column > 1, "{error}");
    assert!(error.to_string().starts_with(&format!("acme.toml:{line}:{column}: ")), "{error}");
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

/// Every value of each shipped provider's status as its official SDK declares it, as the
/// conformance suite writes them from the pinned SDKs (`tests/conformance/judge.py values
/// --write`: google-genai, groq, mistralai, together, fireworks-ai, huggingface_hub, runpod) or, for
/// Cursor, which has no SDK, from its API reference.
const SDK_VALUES: &str = include_str!("../../../../tests/conformance/sdk_values.json");

/// The values a recipe maps that its SDK does not list, each with why: the names Gemini's state
/// expression gives an operation (which has no state, only `done`, `error`, `response`), and the
/// state a stopped Cursor agent reads (not in the reference's enum).
const NOT_THE_SDKS: &[(&str, &str)] = &[
    ("gemini", "operation_running"),
    ("gemini", "operation_done"),
    ("gemini", "operation_error"),
    ("gemini", "operation_filtered"),
    ("cursor", "STOPPED"),
];

#[test]
fn every_shipped_recipe_reads_and_maps_every_status_its_sdk_declares_and_no_other() {
    let sdk: serde_json::Value = serde_json::from_str(SDK_VALUES).unwrap();
    let recipes = sdk["recipes"].as_object().expect("sdk_values.json has the recipes' values");
    assert_eq!(SHIPPED.len(), recipes.len(), "each shipped recipe has its SDK's values, and no other");
    for (file, text) in SHIPPED {
        let recipe = Recipe::parse_shipped(file, text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(format!("{}.toml", recipe.name), *file);
        let statuses: Vec<&str> = recipes
            .get(&recipe.name)
            .and_then(|v| v.as_array())
            .unwrap_or_else(|| panic!("{file}: no SDK values"))
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(!statuses.is_empty(), "{file}");
        for status in &statuses {
            assert!(recipe.states.iter().any(|(value, _)| value == status), "{file}: {status} is not mapped");
        }
        for (value, _) in &recipe.states {
            assert!(
                statuses.contains(&value.as_str()) || NOT_THE_SDKS.contains(&(recipe.name.as_str(), value.as_str())),
                "{file}: {value} is not a value of the SDK"
            );
        }
        // A user's recipe may not take a shipped provider's name.
        assert_eq!(refusal(&with("name = \"acme-batch\"", &format!("name = \"{}\"", recipe.name))).key, "name");
    }
}

/// A fixture of the conformance suite (`tests/fixtures/`, each validated by its SDK).
fn fixture(name: &str) -> serde_json::Value {
    let path = format!("{}/../../tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
}

fn shipped_recipe(name: &str) -> Recipe {
    let (file, text) = SHIPPED.iter().find(|(file, _)| *file == format!("{name}.toml")).unwrap();
    Recipe::parse_shipped(file, text).unwrap()
}

/// Each SDK value, put where its provider's answer has it (in a fixture its SDK validates), reads
/// as the state the recipe's table gives it: the state expression reads what the table maps.
#[test]
fn every_sdk_value_in_its_providers_answer_reads_as_its_table_says() {
    let sdk: serde_json::Value = serde_json::from_str(SDK_VALUES).unwrap();
    let at: &[(&str, &str, &str)] = &[
        ("gemini", "gemini/batch", "/metadata/state"),
        ("groq", "groq/batch", "/status"),
        ("mistral", "mistral/batch_job", "/status"),
        ("together", "together/fine_tune", "/status"),
        ("fireworks", "fireworks/batch_inference_job", "/state"),
        ("runpod", "runpod/status", "/status"),
        ("huggingface", "huggingface/job", "/status/stage"),
        ("cursor", "cursor/agent", "/status"),
    ];
    assert_eq!(at.len(), SHIPPED.len());
    for (name, fixture_name, pointer) in at {
        let recipe = shipped_recipe(name);
        for value in sdk["recipes"][name].as_array().unwrap() {
            let mut answer = fixture(fixture_name);
            *answer.pointer_mut(pointer).unwrap_or_else(|| panic!("{fixture_name}{pointer}")) = value.clone();
            let read = recipe.read_answer("x/y", answer.to_string().as_bytes(), 1).unwrap_or_else(|e| panic!("{name} {value}: {e}"));
            let mapped = recipe.states.iter().find(|(v, _)| v == value.as_str().unwrap()).map(|(_, s)| *s);
            assert_eq!((Some(read.event.state), read.unknown), (mapped, None), "{name} {value}");
        }
    }
}

#[test]
fn the_new_shipped_recipes_read_their_providers_answers() {
    let read =
        |name: &str, id: &str, answer: &serde_json::Value| shipped_recipe(name).read_answer(id, answer.to_string().as_bytes(), 1).unwrap();
    // Gemini: a batch that succeeded names its responses file; its times are RFC 3339.
    let batch = read("gemini", "batches/nm123", &fixture("gemini/batch_ended"));
    assert_eq!(batch.event.state, JobState::Succeeded);
    assert_eq!(batch.event.result.and_then(|r| r.text).as_deref(), Some("files/batch-nm123-output"));
    assert_eq!(batch.event.finished_at, crate::job::parse_rfc3339("2026-12-01T11:30:00Z"));
    assert_eq!((batch.event.kind.as_deref(), batch.event.label.as_deref()), (Some("gemini/batch"), Some("nightly-eval")));
    // Gemini: an operation runs until `done`, then gives its video, its error, or says the safety
    // filter took every video (a failure with Google's reason, never a success without a video).
    let running = read("gemini", "models/veo-3.0-generate-001/operations/op7", &fixture("gemini/video_operation"));
    assert_eq!((running.event.state, running.unknown), (JobState::Running, None));
    let video = read("gemini", "models/veo-3.0-generate-001/operations/op7", &fixture("gemini/video_operation_ended"));
    assert_eq!(video.event.state, JobState::Succeeded);
    assert_eq!(video.event.kind.as_deref(), Some("gemini/operation/veo-3.0-generate-001"));
    assert_eq!(
        video.event.result.map(|r| r.urls),
        Some(vec!["https://generativelanguage.googleapis.com/v1beta/files/vid7:download?alt=media".to_owned()])
    );
    let failed = json!({"name": "models/veo/operations/op8", "done": true, "error": {"code": 3, "message": "the prompt was refused"}});
    assert_eq!(read("gemini", "models/veo/operations/op8", &failed).event.error.as_deref(), Some("the prompt was refused"));
    let filtered = json!({"name": "models/veo/operations/op9", "done": true, "response": {"generateVideoResponse":
                          {"raiMediaFilteredCount": 1, "raiMediaFilteredReasons": ["celebrity likeness"]}}});
    let filtered = read("gemini", "models/veo/operations/op9", &filtered);
    assert_eq!((filtered.event.state, filtered.event.error.as_deref()), (JobState::Failed, Some("celebrity likeness")));
    // RunPod: a failed job says why; a job id without its endpoint cannot be polled.
    let runpod = read("runpod", "ep1/c80ffee4-u1", &fixture("runpod/status_ended"));
    assert_eq!((runpod.event.state, runpod.event.error.as_deref()), (JobState::Failed, Some("CUDA out of memory")));
    let recipe = shipped_recipe("runpod");
    let secret = |_: super::Wanted<'_>| Ok("k".to_owned());
    assert_eq!(recipe.poll.url.fill(&recipe.base_url, "ep1/job-1", &secret).unwrap(), "https://api.runpod.ai/v2/ep1/status/job-1");
    assert!(recipe.poll.url.fill(&recipe.base_url, "job-1", &secret).unwrap_err().to_string().contains("no piece 1"));
    // Hugging Face: the stage's message is the error; the job's page is the Hub's.
    let hf = read("huggingface", "lhoestq/687fb701029421ae5549d998", &fixture("huggingface/job_ended"));
    assert_eq!((hf.event.state, hf.event.error.as_deref()), (JobState::Failed, Some("Job failed with exit code: 1")));
    assert_eq!(hf.event.provider_url.as_deref(), Some("https://huggingface.co/jobs/lhoestq/687fb701029421ae5549d998"));
    assert_eq!(hf.event.finished_at, crate::job::parse_rfc3339("2026-12-01T10:42:00Z"));
    // Fireworks: a fine-tune that failed, with its status message and its kind of job.
    let fw = read("fireworks", "accounts/acme/supervisedFineTuningJobs/sft-1", &fixture("fireworks/supervised_fine_tuning_job_ended"));
    assert_eq!((fw.event.state, fw.event.error.as_deref()), (JobState::Failed, Some("the dataset has no messages field")));
    assert_eq!(fw.event.kind.as_deref(), Some("fireworks/supervisedFineTuningJobs"));
    let recipe = shipped_recipe("fireworks");
    assert_eq!(
        recipe.poll.url.fill(&recipe.base_url, "accounts/acme/batchInferenceJobs/bij-1", &secret).unwrap(),
        "https://api.fireworks.ai/v1/accounts/acme/batchInferenceJobs/bij-1"
    );
    // Cursor: a finished agent's summary and pull request, and its page.
    let agent = read("cursor", "bc-3a1b9c00-0000-0000-0000-000000000001", &fixture("cursor/agent_ended"));
    assert_eq!(agent.event.state, JobState::Succeeded);
    let result = agent.event.result.unwrap();
    assert_eq!(result.text.as_deref(), Some("Added README.md with installation instructions and usage examples"));
    assert_eq!(result.urls, vec!["https://github.com/your-org/your-repo/pull/1234".to_owned()]);
    assert_eq!(agent.event.provider_url.as_deref(), Some("https://cursor.com/agents?id=bc-3a1b9c00-0000-0000-0000-000000000001"));
    assert!(shipped_recipe("cursor").owns("bc-3a1b9c00") && shipped_recipe("gemini").owns("batches/1"));
    // Together: a batch (any id but a fine-tune's ft-...) is polled at /v1/batches and names its
    // output file.
    let recipe = shipped_recipe("together");
    assert_eq!(recipe.poll.url_for("5b1d").fill(&recipe.base_url, "5b1d", &secret).unwrap(), "https://api.together.ai/v1/batches/5b1d");
    assert_eq!(recipe.poll.url_for("ft-1").fill(&recipe.base_url, "ft-1", &secret).unwrap(), "https://api.together.ai/v1/fine-tunes/ft-1");
    let batch = read("together", "5b1d", &fixture("together/batch_ended"));
    assert_eq!((batch.event.state, batch.event.kind.as_deref()), (JobState::Succeeded, Some("together/batch")));
    assert_eq!(batch.event.result.and_then(|r| r.text).as_deref(), Some("file-out-1"));
    // An operation's answer without its name still reads.
    assert_eq!(read("gemini", "models/veo/operations/x", &json!({"done": false})).event.kind.as_deref(), Some("gemini/operation/"));
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

/// The book's recipe ("Add any provider", docs/src/providers/recipes.md) is a valid one of twenty
/// lines or fewer, as shown.
#[test]
fn the_books_recipe_is_valid_and_short() {
    let page = include_str!("../../../../docs/src/providers/recipes.md");
    let section = page.split("# Add any provider").nth(1).expect("the book's recipe page");
    let recipe = section.split("```toml\n").nth(1).and_then(|rest| rest.split("\n```").next()).expect("its recipe");
    let lines = recipe.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(lines <= 20, "the book's recipe has {lines} lines");
    let parsed = Recipe::parse("docs/src/providers/recipes.md", recipe).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed.name, "acme");
    // The README's "Add any provider" shows the same recipe.
    let readme = include_str!("../../../../README.md");
    let section = readme.split("## Add any provider").nth(1).expect("the README's section");
    let shown = section.split("```toml\n").nth(1).and_then(|rest| rest.split("\n```").next()).expect("its recipe");
    assert_eq!(shown, recipe, "the README's recipe is the book's");
    // "Beyond the poll": its sections, with the first recipe's name, [read] and [states], read.
    let beyond = page.split("## Beyond the poll").nth(1).expect("the optional sections");
    let sections = beyond.split("```toml\n").nth(1).and_then(|rest| rest.split("\n```").next()).expect("their example");
    let read = &recipe[recipe.find("[read]").unwrap()..];
    let whole = format!("name = \"acme\"\nbase_url = \"https://api.acme.example\"\n{sections}\n{read}");
    let parsed = Recipe::parse("docs/src/providers/recipes.md", &whole).unwrap_or_else(|e| panic!("{e}"));
    assert!(parsed.cancel.is_some() && parsed.discover.is_some() && parsed.webhook.is_some());
    assert_eq!(parsed.poll.not_found, NotFound::Ended);
}

#[test]
fn a_404_means_an_unknown_job_unless_the_recipe_says_its_provider_forgets_ended_jobs() {
    assert_eq!(Recipe::parse("acme.toml", TOGETHER_LIKE).unwrap().poll.not_found, NotFound::UnknownJob);
    let forgets = Recipe::parse("acme.toml", &with("[read]", "not_found = \"ended\"\n[read]")).unwrap();
    assert_eq!(forgets.poll.not_found, NotFound::Ended);
}

/// `{secret.NAME}` is read from the secret store by its name (`NEVERMISS_<PROVIDER>_<NAME>` in
/// the engine); one that is not set makes a configuration error naming where to set it, and the
/// poll is not sent.
#[tokio::test]
async fn a_named_secret_fills_its_header_and_a_missing_one_names_where_to_set_it() {
    let text = with(
        "headers = { Authorization = \"Bearer {api_key}\" }",
        "headers = { Authorization = \"Bearer {api_key}\", X-Team = \"{secret.team_id}\" }",
    );
    let ctx = crate::test_context();
    let memory = std::sync::Arc::new(crate::InMemory::default());
    let ctx = crate::ProviderContext { secrets: memory.clone(), ..ctx };
    crate::Credentials::set(memory.as_ref(), "acme-batch", crate::SecretKind::ApiKey, Some("k-1")).unwrap();
    let provider = RecipeProvider::new(Recipe::parse("acme.toml", &text).unwrap(), "test".into(), ctx);
    let job = crate::JobRef::new("ab-1");
    match crate::Provider::fetch_status(&provider, &job).await {
        Err(crate::FetchError::NotConfigured(why)) => {
            assert!(why.contains("team_id") && why.contains("NEVERMISS_ACME_BATCH_TEAM_ID"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    memory.named.write().unwrap().insert(("acme-batch".into(), "team_id".into()), "team-9".into());
    let request = provider.request("ab-1").unwrap().build().unwrap();
    assert_eq!(request.headers()["x-team"], "team-9");
    assert_eq!(request.headers()["authorization"], "Bearer k-1");
}

#[test]
fn cancel_and_discovery_are_checked_when_the_recipe_is_read() {
    let cancel = "[cancel]\nurl = \"{base_url}/v1/batches/{job_id}/cancel\"\n\n[read]";
    let recipe = Recipe::parse("acme.toml", &with("[read]", cancel)).unwrap();
    let secret = |_: super::Wanted<'_>| Ok("k".to_owned());
    let url = recipe.cancel.as_ref().unwrap().url_for("ab-1").unwrap().fill(&recipe.base_url, "ab-1", &secret).unwrap();
    assert_eq!(url, "https://api.acme.example/v1/batches/ab-1/cancel");
    assert_eq!(recipe.cancel.as_ref().unwrap().method, reqwest::Method::POST);
    assert!(recipe.discover.is_none());

    let cases: &[(&str, &str, &str)] = &[
        ("[cancel]\nmethod = \"POST\"\n\n[read]", "cancel", "names no URL"),
        ("[cancel]\nurl = \"{base_url}/x/{job_id}\"\nmethod = \"GET\"\n\n[read]", "cancel.method", "write POST or DELETE"),
        ("[cancel]\nurl = \"http://api.acme.example/x/{job_id}\"\n\n[read]", "cancel.url", "https://"),
        ("[cancel]\nurl = \"{base_url}/x/{job_id}?key={api_key}\"\n\n[read]", "cancel.url", "never in a URL"),
        (
            "[discover]\nurl = \"{base_url}/v1/batches/{job_id}\"\njobs = \".data\"\njob_id = \".id\"\n\n[read]",
            "discover.url",
            "without {job_id}",
        ),
        (
            "[discover]\nurl = \"{base_url}/v1/batches\"\njobs = \".data\"\njob_id = \".id\"\nnext = \".next\"\n\n[read]",
            "discover.cursor_param",
            "name the query parameter",
        ),
        (
            "[discover]\nurl = \"{base_url}/v1/batches\"\njobs = \".data\"\njob_id = \".id\"\ncursor_param = \"after\"\n\n[read]",
            "discover.next",
            "is missing",
        ),
        ("[discover]\nurl = \"{base_url}/v1/batches\"\njobs = \"input\"\njob_id = \".id\"\n\n[read]", "discover.jobs", "input"),
        (
            "[discover]\nurl = \"{base_url}/v1/batches\"\njobs = \".data\"\njob_id = \".id\"\nlimit = 3\n\n[read]",
            "discover.limit",
            "unknown field",
        ),
    ];
    for (section, key, problem) in cases {
        let e = refusal(&with("[read]", section));
        assert_eq!((e.file.as_str(), e.key.as_str()), ("acme.toml", *key), "{e}");
        assert!(e.problem.contains(problem), "{e}");
    }
    // A list is walked by when each job was created: a recipe that cannot read it cannot discover.
    let discover = "[discover]\nurl = \"{base_url}/v1/batches\"\njobs = \".data\"\njob_id = \".id\"\n\n[read]";
    let e = refusal(&with("[read]", discover).replace("created_at = \".created_at\"\n", ""));
    assert_eq!(e.key, "discover");
    assert!(e.problem.contains("read.created_at"), "{e}");
}

#[test]
fn a_page_of_the_list_is_read_job_by_job_newest_first_with_its_next_cursor() {
    use crate::discovery::Listed;
    let section = "[discover]\nurl = \"{base_url}/v1/batches?limit=2\"\njobs = \".data\"\njob_id = \".id\"\n\
                   next = \"if .has_more then .data[-1].id else empty end\"\ncursor_param = \"after\"\n\n[read]";
    let recipe = Recipe::parse("acme.toml", &with("[read]", section)).unwrap();
    let discover = recipe.discover.as_ref().unwrap();
    // Oldest first as written, and one job without an id.
    let page = json!({"data": [
        {"id": "ab-1", "status": "COMPLETED", "created_at": 1_764_000_000, "completed_at": 1_764_000_100},
        {"status": "IN_PROGRESS", "created_at": 1_764_000_050},
        {"id": "ab-2", "status": "WEIRD", "created_at": 1_764_000_200},
    ], "has_more": true});
    let read = discover.read_page(&recipe, page.to_string().as_bytes(), 9).unwrap();
    assert_eq!(read.next.as_deref(), Some("ab-2"));
    let jobs: Vec<_> = read.items.into_iter().map(|job| (job.created_ms(), job.into_event())).collect();
    assert_eq!(jobs[0].0, Some(1_764_000_200_000), "newest first");
    let newest = jobs[0].1.as_ref().unwrap();
    assert_eq!((newest.job_id.as_str(), newest.state), ("ab-2", JobState::Running), "an unknown value is never a success");
    let oldest = jobs[1].1.as_ref().unwrap();
    assert_eq!((oldest.job_id.as_str(), oldest.state, oldest.seq), ("ab-1", JobState::Succeeded, 9));
    assert_eq!(jobs[2].0, None, "a job that does not read has no time: the walk skips it");
    assert!(jobs[2].1.as_ref().unwrap_err().contains("gave no job id"), "{:?}", jobs[2].1);

    let last = json!({"data": [], "has_more": false});
    assert_eq!(discover.read_page(&recipe, last.to_string().as_bytes(), 9).unwrap().next, None);
    let odd = json!({"data": {"id": "ab-1"}});
    assert!(discover.read_page(&recipe, odd.to_string().as_bytes(), 9).err().unwrap().contains("not a list of jobs"));
}

#[test]
fn a_job_id_is_checked_against_the_recipes_ids_and_the_pieces_its_url_needs() {
    let runpod = shipped_recipe("runpod");
    assert_eq!(runpod.check_job_id("ep1/job-1"), Ok(()));
    let e = runpod.check_job_id("job-1").unwrap_err().to_string();
    assert!(e.contains("has no piece 1") && e.contains("2 pieces joined by /"), "{e}");
    assert!(runpod.check_job_id("ep1/").is_err(), "an empty piece");
    let gemini = shipped_recipe("gemini");
    assert_eq!(gemini.check_job_id("batches/abc"), Ok(()));
    let e = gemini.check_job_id("abc").unwrap_err().to_string();
    assert!(e.contains("batches/... or models/..."), "{e}");
    assert!(gemini.check_job_id("batches/../files/x").unwrap_err().to_string().contains("not a path of names"));
    // Together lists no prefix: a batch's id is any id, a fine-tune's starts with ft-.
    let together = shipped_recipe("together");
    assert_eq!(together.check_job_id("5b1d0c2e"), Ok(()));
    assert_eq!(together.check_job_id("ft-1"), Ok(()));
    // Gemini cancels batches, not operations; Together each kind at its own URL.
    let secret = |_: super::Wanted<'_>| Ok("k".to_owned());
    let cancel = gemini.cancel.as_ref().unwrap();
    assert!(cancel.url_for("models/veo-3/operations/op1").is_none());
    let url = cancel.url_for("batches/abc").unwrap().fill(&gemini.base_url, "batches/abc", &secret).unwrap();
    assert_eq!(url, "https://generativelanguage.googleapis.com/v1beta/batches/abc:cancel");
    let cancel = together.cancel.as_ref().unwrap();
    assert!(cancel.url_for("ft-1").unwrap().fill(&together.base_url, "ft-1", &secret).unwrap().ends_with("/v1/fine-tunes/ft-1/cancel"));
    assert!(cancel.url_for("b-1").unwrap().fill(&together.base_url, "b-1", &secret).unwrap().ends_with("/v1/batches/b-1/cancel"));
}

/// Each shipped recipe's cancel call is the path its SDK's cancel sends (named in each recipe's
/// notes: runpod's `Job.cancel`, groq's and mistralai's `cancel`, huggingface_hub's `cancel_job`,
/// Cursor's reference "Stop an agent"); an id of a kind without a cancel has none.
#[test]
fn each_shipped_cancel_is_its_sdks_path() {
    let secret = |_: super::Wanted<'_>| Ok("k".to_owned());
    let cases = [
        ("runpod", "ep1/job-1", "/v2/ep1/cancel/job-1"),
        ("groq", "batch_01", "/openai/v1/batches/batch_01/cancel"),
        ("mistral", "b6d0", "/v1/batch/jobs/b6d0/cancel"),
        ("huggingface", "acme/6800", "/api/jobs/acme/6800/cancel"),
        ("cursor", "bc-1", "/v0/agents/bc-1/stop"),
        ("gemini", "batches/nm123", "/v1beta/batches/nm123:cancel"),
        ("together", "ft-1", "/v1/fine-tunes/ft-1/cancel"),
        ("together", "5b1d", "/v1/batches/5b1d/cancel"),
    ];
    for (name, id, path) in cases {
        let recipe = shipped_recipe(name);
        let cancel = recipe.cancel.as_ref().unwrap_or_else(|| panic!("{name} has a cancel"));
        let url = cancel.url_for(id).unwrap().fill(&recipe.base_url, id, &secret).unwrap();
        assert_eq!(url, format!("{}{path}", recipe.base_url), "{name}");
        assert_eq!(cancel.method, reqwest::Method::POST, "{name}");
    }
    assert!(shipped_recipe("fireworks").cancel.is_none(), "fireworks' batch inference jobs have no cancel");
}

/// The shipped recipes' webhooks read as their providers send them: Gemini's event types (a
/// batch's end is its state, video.generated a hint the poll confirms, an interaction no job of
/// NeverMiss's, any other type unknown and counted), Cursor's status, RunPod's job id alone.
#[test]
fn shipped_recipes_read_their_providers_webhooks() {
    use crate::{Provider, Unusable};
    let provider = |name: &str| RecipeProvider::new(shipped_recipe(name), "shipped recipe".into(), crate::test_context());
    let headers = crate::test_headers("dlv-1");
    let gemini = provider("gemini");
    let read = |body: serde_json::Value| gemini.parse(&headers, body.to_string().as_bytes());
    for (kind, state) in [
        ("batch.succeeded", JobState::Succeeded),
        ("batch.failed", JobState::Failed),
        ("batch.expired", JobState::Failed),
        ("video.generated", JobState::Running),
    ] {
        let parsed = read(json!({"type": kind, "data": {"id": "batches/b1"}})).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            (parsed.delivery_id.as_str(), parsed.event.job_id.as_str(), parsed.event.state),
            ("dlv-1", "batches/b1", state),
            "{kind}"
        );
    }
    let interaction = read(json!({"type": "interaction.completed", "data": {"id": "interactions/i1"}})).unwrap_err();
    assert_eq!((interaction.kind, interaction.unknown.is_none()), (Unusable::Unhandled, true), "{interaction:?}");
    let unknown = read(json!({"type": "batch.paused", "data": {"id": "batches/b1"}})).unwrap_err();
    assert_eq!(unknown.kind, Unusable::Unhandled);
    assert_eq!(unknown.unknown.map(|u| (u.field, u.value)), Some(("webhook", "batch.paused".to_owned())));
    assert_eq!(read(json!({"type": "batch.succeeded", "data": {}})).unwrap_err().kind, Unusable::Malformed);

    let cursor = provider("cursor");
    let mut with_id = headers.clone();
    with_id.insert("x-webhook-id", "cursor-dlv-1".parse().unwrap());
    let body = br#"{"event":"statusChange","id":"bc-1","status":"ERROR"}"#;
    let parsed = cursor.parse(&with_id, body).unwrap();
    // Cursor's X-Webhook-ID is not signed: the signed body's hash names the delivery.
    assert!(parsed.delivery_id.starts_with("sha256:"), "{}", parsed.delivery_id);
    with_id.insert("x-webhook-id", "cursor-dlv-2".parse().unwrap());
    assert_eq!(cursor.parse(&with_id, body).unwrap().delivery_id, parsed.delivery_id, "another id on the same body is a resend");
    assert_eq!((parsed.event.job_id.as_str(), parsed.event.state), ("bc-1", JobState::Failed));

    let runpod = provider("runpod");
    assert!(runpod.takes_url_token());
    let parsed = runpod.parse(&headers, br#"{"id":"abc-u1","status":"COMPLETED"}"#).unwrap();
    assert_eq!((parsed.event.job_id.as_str(), parsed.event.state), ("abc-u1", JobState::Unknown), "a hint: the poll says");
    assert!(
        runpod.check_job_id("abc-u1").is_err() && runpod.check_job_id("ep1/abc-u1").is_ok(),
        "RunPod's id needs its endpoint to be polled"
    );
}

/// The keys each table of a recipe takes, as the parser itself lists them: an unknown key in the
/// table is refused with serde's "expected one of `a`, `b`, ...".
fn keys_of(table: &str) -> Vec<String> {
    let text = if table.is_empty() {
        format!("zz_unknown = 1\n{TOGETHER_LIKE}")
    } else if TOGETHER_LIKE.contains(&format!("[{table}]\n")) {
        TOGETHER_LIKE.replacen(&format!("[{table}]\n"), &format!("[{table}]\nzz_unknown = 1\n"), 1)
    } else {
        format!("{TOGETHER_LIKE}\n[{table}]\nzz_unknown = 1\n")
    };
    let problem = refusal(&text).problem;
    let expected = problem.split("expected").nth(1).unwrap_or_else(|| panic!("[{table}]: {problem}"));
    expected.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

#[test]
fn the_recipes_page_names_every_key_the_parser_takes() {
    let page = include_str!("../../../../docs/src/providers/recipes.md");
    let top = keys_of("");
    assert!(top.contains(&"poll".to_owned()) && top.contains(&"discover".to_owned()), "{top:?}");
    assert!(keys_of("read").len() >= 10 && keys_of("webhook").contains(&"jwks_url".to_owned()), "the parser's lists are read");
    let mut missing = Vec::new();
    for key in &top {
        let tables = ["poll", "read", "webhook", "cancel", "discover"];
        if tables.contains(&key.as_str()) {
            for field in keys_of(key) {
                let dotted = format!("`{key}.{field}`");
                if !page.contains(&dotted) {
                    missing.push(dotted);
                }
                // A table inside the table (`[discover.account]`): its keys too.
                if key == "discover" && field == "account" {
                    for inner in keys_of("discover.account") {
                        let dotted = format!("`discover.account.{inner}`");
                        if !page.contains(&dotted) {
                            missing.push(dotted);
                        }
                    }
                }
            }
        } else if key == "states" {
            for written in ["`states.<VALUE>`", "`states.when_unknown`"] {
                if !page.contains(written) {
                    missing.push(written.to_owned());
                }
            }
        } else if !page.contains(&format!("| `{key}` |")) {
            missing.push(format!("`{key}`"));
        }
    }
    assert!(missing.is_empty(), "docs/src/providers/recipes.md's table of keys lacks {missing:?}");
}

/// `{account}` is the list's: `discover.url` may name it (filled from the owner's setting or
/// `[discover.account]`'s answer), a job's own calls may not; `[discover.account]` only where the
/// URL names it, and its call never names the job or the account it finds.
#[test]
fn the_account_is_named_only_by_the_list_and_found_by_its_own_call() {
    let discover =
        |url: &str, account: &str| format!("{TOGETHER_LIKE}\n[discover]\nurl = \"{url}\"\njobs = \".data\"\njob_id = \".id\"\n{account}");
    let recipe = Recipe::parse("acme.toml", &discover("{base_url}/v1/{account}/batches", "")).unwrap();
    let listing = recipe.discover.as_ref().unwrap();
    assert!(listing.needs_account_setting(), "no call finds it: the owner sets it");
    let lookup = "[discover.account]\nurl = \"{base_url}/v1/me\"\nname = \".login\"\n";
    let recipe = Recipe::parse("acme.toml", &discover("{base_url}/v1/{account}/batches", lookup)).unwrap();
    let listing = recipe.discover.as_ref().unwrap();
    assert!(!listing.needs_account_setting());
    let found = listing.account.as_ref().unwrap();
    assert_eq!(found.read(br#"{"login": " team-a "}"#), Ok("team-a".to_owned()));
    assert!(found.read(br#"{"login": ""}"#).unwrap_err().contains("no account name"));
    let value = |wanted: super::Wanted<'_>| match wanted {
        super::Wanted::Account => Ok("team a/b".to_owned()),
        other => Err(crate::FetchError::NotConfigured(format!("{other:?}"))),
    };
    assert_eq!(
        listing.url.fill(&recipe.base_url, "", &value).unwrap(),
        "https://api.acme.example/v1/team%20a%2Fb/batches",
        "one path segment"
    );
    for climbing in ["..", ".", ""] {
        let value = |_: super::Wanted<'_>| Ok(climbing.to_owned());
        assert!(listing.url.fill(&recipe.base_url, "", &value).is_err(), "the account {climbing:?} was put in the URL");
    }

    let refused = refusal(&with("url = \"{base_url}/v1/batches/{job_id}\"", "url = \"{base_url}/v1/{account}/batches/{job_id}\""));
    assert_eq!(refused.key, "poll.url", "{refused}");
    assert!(refused.problem.contains("only discover.url may name"), "{refused}");
    let refused = refusal(&discover("{base_url}/v1/batches", lookup));
    assert_eq!(refused.key, "discover.account", "{refused}");
    let refused =
        refusal(&discover("{base_url}/v1/{account}/batches", "[discover.account]\nurl = \"{base_url}/v1/{account}\"\nname = \".login\"\n"));
    assert_eq!(refused.key, "discover.account.url", "{refused}");
}
