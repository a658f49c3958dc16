//! What a finished job produced, read from what its provider already answers (contract section
//! 6): an excerpt of its text, the URLs of its outputs and its first image, never whole outputs.
//! Pure functions, one per provider's shape (the shapes are the providers' official SDK types),
//! each ending in `bounded`: at most `TEXT_MAX_CHARS` characters of text (its first lines), at
//! most `URLS_MAX` URLs of at most `URL_MAX_BYTES` bytes each, `https` or `http` only, credentials
//! masked as a kept request's are (`refusal`'s words: a URL's user and password, a query value
//! named like a secret, and a word of the text that looks like an API key).
//!
//! Each provider calls these where it turns a webhook or a poll answer into an event, so both
//! paths give a job the same result.

use serde_json::Value;

use crate::job::JobResult;

/// Most characters of a result's text.
pub const TEXT_MAX_CHARS: usize = 300;
/// Most lines of a result's text (its first ones).
pub const TEXT_MAX_LINES: usize = 4;
/// Most URLs kept of one result.
pub const URLS_MAX: usize = 5;
/// Longest URL kept.
pub const URL_MAX_BYTES: usize = 2048;

/// A result from its parts, bounded and masked; `None` when nothing usable remains. `image` is
/// kept only when it is a usable URL (it need not be among `urls`).
pub fn bounded<I: IntoIterator<Item = String>>(text: Option<&str>, urls: I, image: Option<&str>) -> Option<JobResult> {
    let mut kept: Vec<String> = Vec::new();
    for url in urls.into_iter().filter_map(|u| link(&u)) {
        if kept.len() == URLS_MAX {
            break;
        }
        if !kept.contains(&url) {
            kept.push(url);
        }
    }
    let result = JobResult { text: text.and_then(excerpt), urls: kept, image: image.and_then(link) };
    (!result.is_empty()).then_some(result)
}

/// The first lines of `text`, at most `TEXT_MAX_CHARS` characters (an ellipsis when cut), with
/// words that look like API keys masked; `None` when blank.
pub fn excerpt(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return None;
    }
    let more_lines = lines.len() > TEXT_MAX_LINES;
    let joined = lines.into_iter().take(TEXT_MAX_LINES).collect::<Vec<_>>().join("\n");
    let masked = mask_words(&joined);
    let cut = match masked.char_indices().nth(TEXT_MAX_CHARS) {
        Some((at, _)) => format!("{}…", &masked[..at]),
        None if more_lines => format!("{masked}…"),
        None => masked,
    };
    Some(cut)
}

fn mask_words(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        // A word that looks like a credential (a key with a provider's prefix, a JWT): the one rule
        // of `masking`.
        let looks_like_key = crate::masking::looks_like_a_credential(word);
        out.push_str(if looks_like_key { crate::masking::MASK } else { word });
        word.clear();
    };
    for c in text.chars() {
        if c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ',' | ';' | '(' | ')' | '<' | '>') {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// `url` when it can be kept: `https` or `http`, with a host, at most `URL_MAX_BYTES` bytes; its
/// user and password dropped and the values of query parameters named like a secret masked.
pub fn link(url: &str) -> Option<String> {
    let url = url.trim();
    if url.len() > URL_MAX_BYTES {
        return None;
    }
    let mut parsed = reqwest::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "https" | "http") || parsed.host_str().is_none_or(str::is_empty) {
        return None;
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
    }
    let secret_query = parsed.query_pairs().any(|(k, _)| crate::masking::names_a_credential(&k));
    if secret_query {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if crate::masking::names_a_credential(&k) { crate::masking::MASK.to_owned() } else { v.into_owned() };
                (k.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    let kept = parsed.to_string();
    (kept.len() <= URL_MAX_BYTES).then_some(kept)
}

/// Whether a URL names an image file (by its path's extension).
pub fn is_image_url(url: &str) -> bool {
    let path = url.split(['?', '#']).next().unwrap_or_default().to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".webp", ".gif", ".avif", ".bmp"].iter().any(|ext| path.ends_with(ext))
}

/// The strings of a JSON value that are URLs, depth first, in order (at most `limit`).
fn urls_in(value: &Value, limit: usize, out: &mut Vec<String>) {
    if out.len() >= limit {
        return;
    }
    match value {
        Value::String(s) if s.starts_with("https://") || s.starts_with("http://") => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| urls_in(v, limit, out)),
        Value::Object(map) => map.values().for_each(|v| urls_in(v, limit, out)),
        _ => {}
    }
}

/// A Replicate prediction's `output` (replicate-python's `Prediction.output: object`): a string
/// (text or a file URL), a list of them (files, or a language model's streamed tokens, joined),
/// or an object (a training's `{"version", "weights"}`, a model's named outputs). Its URLs, the
/// first image among them, and its text.
pub fn replicate(output: &Value) -> Option<JobResult> {
    let mut urls = Vec::new();
    urls_in(output, URLS_MAX * 4, &mut urls);
    let text = match output {
        Value::String(s) if urls.is_empty() => Some(s.clone()),
        // A language model's output: a list of tokens, joined.
        Value::Array(items) if urls.is_empty() && items.iter().all(Value::is_string) => {
            Some(items.iter().filter_map(Value::as_str).collect::<String>())
        }
        Value::Object(map) => map.get("version").and_then(Value::as_str).map(|version| format!("version {version}")),
        _ => None,
    };
    let image = urls.iter().find(|u| is_image_url(u)).cloned();
    bounded(text.as_deref(), urls, image.as_deref())
}

/// An OpenAI response's `output` (openai-python's `Response.output: List[ResponseOutputItem]`):
/// the text of its `message` items' `output_text` parts (`ResponseOutputText.text`), or a
/// refusal (`ResponseOutputRefusal.refusal`), in order.
pub fn openai_response(output: &Value) -> Option<JobResult> {
    let mut text = String::new();
    for item in output.as_array().into_iter().flatten().filter(|i| i.get("type").and_then(Value::as_str) == Some("message")) {
        for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
            let said = match part.get("type").and_then(Value::as_str) {
                Some("output_text") => part.get("text").and_then(Value::as_str),
                Some("refusal") => part.get("refusal").and_then(Value::as_str),
                _ => None,
            };
            if let Some(said) = said {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(said);
            }
        }
        if text.chars().count() > TEXT_MAX_CHARS {
            break;
        }
    }
    bounded(Some(&text), Vec::new(), None)
}

/// An OpenAI batch (`Batch.request_counts`, `Batch.output_file_id`, `Batch.error_file_id`): its
/// counts and the files its results are in (fetched with the API key: named, not linked).
pub fn openai_batch(
    completed: i64,
    failed: i64,
    total: i64,
    output_file_id: Option<&str>,
    error_file_id: Option<&str>,
) -> Option<JobResult> {
    let mut text = if total > 0 { format!("{completed} of {total} requests completed") } else { String::new() };
    if failed > 0 {
        text.push_str(&format!(", {failed} failed"));
    }
    for (what, id) in [("output file", output_file_id), ("error file", error_file_id)] {
        if let Some(id) = id.filter(|id| !id.is_empty()) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!("{what} {id}"));
        }
    }
    bounded(Some(&text), Vec::new(), None)
}

/// An OpenAI fine-tuning job's `fine_tuned_model` (`FineTuningJob.fine_tuned_model`).
pub fn openai_fine_tuning(fine_tuned_model: Option<&str>) -> Option<JobResult> {
    let model = fine_tuned_model.filter(|m| !m.is_empty())?;
    bounded(Some(&format!("model {model}")), Vec::new(), None)
}

/// A finished OpenAI video (`Video.seconds`, `Video.size`): what was made. Its content is
/// downloaded with the API key (`GET /v1/videos/{id}/content`), so it has no public link.
pub fn openai_video(seconds: Option<&str>, size: Option<&str>) -> Option<JobResult> {
    let text = match (seconds.filter(|s| !s.is_empty()), size.filter(|s| !s.is_empty())) {
        (Some(seconds), Some(size)) => format!("a {seconds} s video, {size}"),
        (Some(seconds), None) => format!("a {seconds} s video"),
        (None, Some(size)) => format!("a video, {size}"),
        (None, None) => return None,
    };
    bounded(Some(&text), Vec::new(), None)
}

/// An Anthropic Message Batch's `request_counts`, as `RequestCounts::summary` words them.
pub fn anthropic_batch(counts_summary: &str) -> Option<JobResult> {
    bounded(Some(counts_summary), Vec::new(), None)
}

/// An agent's message (`agent.message`'s `content`, a list of blocks of which the `text` ones
/// are read): its text.
pub fn agent_message_text(content: &Value) -> Option<String> {
    let text: Vec<&str> = content
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// An agent run's last message.
pub fn agent_run(last_message: Option<&str>) -> Option<JobResult> {
    bounded(last_message, Vec::new(), None)
}

/// A fal result (a webhook's `payload`, or what a request's `response_url` answers): a model's
/// own output, whose common shapes are `images: [{url, ...}]`, `image: {url}`, `video: {url}`,
/// `audio: {url}` and text in `output` or `text`. Its URLs, its first image (an `images` or
/// `image` entry, or a URL that names an image file) and its text.
pub fn fal(payload: &Value) -> Option<JobResult> {
    let mut urls = Vec::new();
    urls_in(payload, URLS_MAX * 4, &mut urls);
    let declared = payload
        .get("images")
        .and_then(Value::as_array)
        .and_then(|images| images.first())
        .or_else(|| payload.get("image"))
        .and_then(|image| image.get("url"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let image = declared.or_else(|| urls.iter().find(|u| is_image_url(u)).cloned());
    let text = ["output", "text"].into_iter().find_map(|key| payload.get(key).and_then(Value::as_str)).filter(|t| !t.starts_with("http"));
    bounded(text, urls, image.as_deref())
}

/// The generic contract's optional `result` (`{"text", "urls", "image"}`, each optional): what it
/// says, bounded. Fields of another type are left out.
pub fn generic(result: &Value) -> Option<JobResult> {
    let text = result.get("text").and_then(Value::as_str);
    let urls: Vec<String> =
        result.get("urls").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
    let image = result.get("image").and_then(Value::as_str);
    bounded(text, urls, image)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_its_first_lines_cut_and_masked() {
        assert_eq!(excerpt("  \n\n"), None);
        assert_eq!(excerpt("hello Alice\n"), Some("hello Alice".to_owned()));
        let long = "word ".repeat(200);
        let cut = excerpt(&long).unwrap();
        assert_eq!(cut.chars().count(), TEXT_MAX_CHARS + 1, "{cut}");
        assert!(cut.ends_with('…'));
        let many = (1..=10).map(|i| format!("line {i}")).collect::<Vec<_>>().join("\n");
        assert_eq!(excerpt(&many).unwrap(), "line 1\nline 2\nline 3\nline 4…");
        assert_eq!(excerpt("the key is sk-proj-abcdefghijklmnop, keep it").unwrap(), "the key is ••••, keep it");
        assert_eq!(excerpt("r8_0123456789abcdef and sk-short").unwrap(), "•••• and sk-short");
        // Multi-byte characters are cut on a character boundary.
        assert_eq!(excerpt(&"é".repeat(400)).unwrap().chars().count(), TEXT_MAX_CHARS + 1);
    }

    #[test]
    fn only_http_urls_are_kept_bounded_without_credentials() {
        assert_eq!(link("https://replicate.delivery/x/out.png").as_deref(), Some("https://replicate.delivery/x/out.png"));
        assert_eq!(link("http://127.0.0.1:9/a").as_deref(), Some("http://127.0.0.1:9/a"));
        for bad in ["javascript:alert(1)", "data:image/png;base64,AAAA", "file:///etc/passwd", "ftp://x/y", "not a url", "https://"] {
            assert_eq!(link(bad), None, "{bad}");
        }
        assert_eq!(link(&format!("https://x.example/{}", "a".repeat(URL_MAX_BYTES))), None);
        assert_eq!(link("https://user:pw@x.example/a").as_deref(), Some("https://x.example/a"));
        assert_eq!(
            link("https://x.example/f.png?X-Amz-Security-Token=abc&size=2&api_key=k").as_deref(),
            Some("https://x.example/f.png?X-Amz-Security-Token=%E2%80%A2%E2%80%A2%E2%80%A2%E2%80%A2&size=2&api_key=%E2%80%A2%E2%80%A2%E2%80%A2%E2%80%A2")
        );
    }

    #[test]
    fn a_result_keeps_a_few_distinct_urls_and_nothing_is_none() {
        let urls = (0..20).map(|i| format!("https://x.example/{i}.png")).chain(["https://x.example/0.png".to_owned()]);
        let r = bounded(None, urls, Some("javascript:x")).unwrap();
        assert_eq!(r.urls.len(), URLS_MAX);
        assert_eq!(r.image, None);
        assert_eq!(bounded(Some(" "), Vec::new(), None), None);
    }

    #[test]
    fn replicate_outputs() {
        // An image model: a list of file URLs; the first image is the notification's.
        let r = replicate(&json!(["https://replicate.delivery/a/out-0.webp", "https://replicate.delivery/a/out-1.webp"])).unwrap();
        assert_eq!(r.image.as_deref(), Some("https://replicate.delivery/a/out-0.webp"));
        assert_eq!(r.urls.len(), 2);
        assert_eq!(r.text, None);
        // A language model: streamed tokens, joined.
        assert_eq!(replicate(&json!(["Hello", " Alice", "!"])).unwrap().text.as_deref(), Some("Hello Alice!"));
        // A plain string.
        assert_eq!(replicate(&json!("hello Alice")).unwrap(), JobResult { text: Some("hello Alice".into()), urls: vec![], image: None });
        // A training: its version and weights.
        let t = replicate(&json!({"version": "owner/model:abc", "weights": "https://replicate.delivery/w.tar"})).unwrap();
        assert_eq!(t.text.as_deref(), Some("version owner/model:abc"));
        assert_eq!(t.urls, vec!["https://replicate.delivery/w.tar".to_owned()]);
        assert_eq!(replicate(&Value::Null), None);
    }

    #[test]
    fn openai_shapes() {
        let output = json!([
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "The answer is 42.", "annotations": []}]}
        ]);
        assert_eq!(openai_response(&output).unwrap().text.as_deref(), Some("The answer is 42."));
        assert_eq!(openai_response(&json!([])), None);
        let b = openai_batch(98, 2, 100, Some("file-out"), Some("file-err")).unwrap();
        assert_eq!(b.text.as_deref(), Some("98 of 100 requests completed, 2 failed\noutput file file-out\nerror file file-err"));
        assert_eq!(openai_fine_tuning(Some("ft:gpt-4o-mini:org::abc")).unwrap().text.as_deref(), Some("model ft:gpt-4o-mini:org::abc"));
        assert_eq!(openai_fine_tuning(None), None);
        assert_eq!(openai_video(Some("8"), Some("1280x720")).unwrap().text.as_deref(), Some("a 8 s video, 1280x720"));
    }

    #[test]
    fn agent_messages_and_fal_and_generic() {
        let content = json!([{"type": "text", "text": "Done: the module is split in three."}, {"type": "image"}]);
        assert_eq!(agent_message_text(&content).as_deref(), Some("Done: the module is split in three."));
        let f =
            fal(&json!({"images": [{"url": "https://v3.fal.media/files/a/b", "width": 1024, "content_type": "image/jpeg"}], "seed": 4}))
                .unwrap();
        assert_eq!(f.image.as_deref(), Some("https://v3.fal.media/files/a/b"));
        assert_eq!(f.urls, vec!["https://v3.fal.media/files/a/b".to_owned()]);
        assert_eq!(fal(&json!({"output": "a cat on a mat"})).unwrap().text.as_deref(), Some("a cat on a mat"));
        assert_eq!(fal(&json!({"images": []})), None);
        let g = generic(
            &json!({"text": "3 files written", "urls": ["https://x.example/r", 4, "javascript:x"], "image": "https://x.example/i.png"}),
        )
        .unwrap();
        assert_eq!(
            g,
            JobResult {
                text: Some("3 files written".into()),
                urls: vec!["https://x.example/r".into()],
                image: Some("https://x.example/i.png".into())
            }
        );
        assert_eq!(generic(&json!("text")), None);
    }
}
