//! The ntfy sender: one message published to the channel's topic (https://docs.ntfy.sh/publish/).
//!
//! It publishes as JSON to the server's root (`POST https://ntfy.sh/` with
//! `{"topic","title","message","priority","tags","click","attach","actions"}`), not as headers to the topic URL:
//! ntfy documents both, but headers must be ASCII-safe (a job's label is anything the user typed,
//! and ntfy's own docs say to RFC 2047-encode non-ASCII titles), while a JSON body carries UTF-8
//! as it is and gives priority and tags their typed form. The channel is configured with its
//! topic's URL, as ntfy shows it (`https://ntfy.sh/mytopic`); the root and the topic are read
//! from it. A protected topic's access token goes in `Authorization: Bearer`.

use serde_json::{json, Value};

use super::{link_label, Answer, Links};
use crate::notification::{Action, Message, NotifyError};
use crate::store::job::JobState;
use crate::store::outbox::Kind;
/// ntfy's priorities (1 min .. 5 max): urgent messages vibrate longer.
const PRIORITY_HIGH: u8 = 4;
const PRIORITY_DEFAULT: u8 = 3;

/// Publishes `message` to the topic at `topic_url`; answers ntfy's status and the start of its
/// answer (the published message as JSON), or an error naming them.
pub async fn send(
    http: &reqwest::Client,
    topic_url: &str,
    token: Option<&str>,
    message: &Message<'_>,
    links: &Links,
) -> Result<Answer, NotifyError> {
    let (root, topic) = endpoint(topic_url)?;
    let mut request = http.post(root).json(&publication(&topic, message, links));
    if let Some(token) = token.filter(|t| !t.is_empty()) {
        request = request.bearer_auth(token);
    }
    super::post("ntfy", request).await
}

/// The server's root URL (where JSON is published) and the topic, read from a topic's URL
/// (`https://ntfy.sh/mytopic` → `https://ntfy.sh/`, `mytopic`; a server under a path keeps it).
pub fn endpoint(topic_url: &str) -> Result<(String, String), NotifyError> {
    let mut url =
        reqwest::Url::parse(topic_url.trim()).map_err(|e| NotifyError::channel(format!("the ntfy URL {topic_url:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(NotifyError::channel(format!("the ntfy URL {topic_url:?} is not http or https")));
    }
    let mut segments: Vec<String> =
        url.path_segments().map(|s| s.filter(|s| !s.is_empty()).map(str::to_owned).collect()).unwrap_or_default();
    let topic = segments.pop().unwrap_or_default();
    // ntfy's topic names: letters, digits, `-` and `_`, at most 64.
    if topic.is_empty() || topic.len() > 64 || !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(NotifyError::channel(format!(
            "the ntfy URL {topic_url:?} does not end with a topic (letters, digits, - and _, e.g. https://ntfy.sh/mytopic)"
        )));
    }
    let root_path = segments.iter().map(|s| format!("{s}/")).collect::<String>();
    url.set_path(&format!("/{root_path}"));
    url.set_query(None);
    url.set_fragment(None);
    Ok((url.to_string(), topic))
}

/// ntfy shows at most three action buttons.
const MAX_ACTIONS: usize = 3;

/// The JSON ntfy publishes: title, text, priority (high when urgent), tags (an emoji by
/// outcome); the link a tap opens (the job in NeverMiss, else its result, else its provider's
/// page); the job's first image as an attachment by URL (`attach`, shown inline by the apps); and
/// the notification's actions (`Notification::actions`) as `view` buttons: open in NeverMiss (when
/// other buttons are there: alone it is the tap), open the result, open on the provider, and
/// cancel on a stuck job as its page in NeverMiss with the cancel's question asked
/// (`Links::job_cancel`). Never an `http` action: it would have to carry the admin API's token
/// in the message, which ntfy's server and every subscriber of the topic can read.
pub fn publication(topic: &str, message: &Message<'_>, links: &Links) -> Value {
    let mut body = json!({
        "topic": topic,
        "title": message.title(),
        "message": message.body(),
        "priority": if message.is_urgent() { PRIORITY_HIGH } else { PRIORITY_DEFAULT },
        "tags": [tag(message)],
    });
    let link = links.of(message);
    if let Some(click) = link.as_deref().or(message.result_url()).or(message.provider_url()) {
        body["click"] = Value::from(click);
    }
    if let Some(image) = message.image_url() {
        body["attach"] = Value::from(image);
    }
    let mut buttons: Vec<(Action, String)> = message
        .actions()
        .into_iter()
        .filter_map(|action| links.of_action(message, action).map(|url| (action, url)))
        .take(MAX_ACTIONS)
        .collect();
    if buttons.iter().all(|(action, _)| *action == Action::Open) {
        buttons.clear();
    }
    let buttons: Vec<Value> =
        buttons.into_iter().map(|(action, url)| json!({ "action": "view", "label": link_label(action), "url": url })).collect();
    if !buttons.is_empty() {
        body["actions"] = Value::Array(buttons);
    }
    body
}

/// The emoji shortcode ntfy shows before the title (https://docs.ntfy.sh/emojis/).
pub fn tag(message: &Message<'_>) -> &'static str {
    match message {
        Message::One(n) => match n.kind {
            Kind::Terminal => match n.state {
                JobState::Succeeded => "white_check_mark",
                JobState::Failed => "x",
                JobState::Canceled => "no_entry_sign",
                JobState::NeedsInput => "raising_hand",
                JobState::Ended => "grey_question",
                _ => "information_source",
            },
            Kind::Stuck | Kind::Slow | Kind::Abandoned => "warning",
            Kind::TunnelDown => "rotating_light",
            Kind::GroupEnd if message.is_urgent() => "warning",
            Kind::GroupEnd => "package",
        },
        Message::Summary(_) if message.is_urgent() => "warning",
        Message::Summary(_) => "white_check_mark",
        Message::Test { .. } => "bell",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notification::{Notification, Summary};

    fn finished(outbox_id: i64, state: JobState, label: &str) -> Notification {
        crate::channels::finished_for_test(outbox_id, ("replicate", "abc 1"), state, label, None, 61_000)
    }

    fn links() -> Links {
        Links { base: Some("https://hub.example/".into()) }
    }

    #[test]
    fn the_root_and_topic_come_from_the_topic_url() {
        assert_eq!(endpoint("https://ntfy.sh/mytopic").unwrap(), ("https://ntfy.sh/".to_owned(), "mytopic".to_owned()));
        assert_eq!(endpoint("https://ntfy.sh/mytopic/").unwrap(), ("https://ntfy.sh/".to_owned(), "mytopic".to_owned()));
        assert_eq!(
            endpoint("http://127.0.0.1:8080/ntfy/jobs_1?x=1").unwrap(),
            ("http://127.0.0.1:8080/ntfy/".to_owned(), "jobs_1".to_owned())
        );
        for bad in ["https://ntfy.sh/", "https://ntfy.sh", "ntfy.sh/mytopic", "ftp://ntfy.sh/a", "https://ntfy.sh/my%20topic"] {
            let e = endpoint(bad).unwrap_err().0;
            assert!(e.contains("ntfy URL"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_success_is_published_at_the_default_priority_with_its_link() {
        let n = finished(7, JobState::Succeeded, "Frühling ☀");
        let body = publication("jobs", &Message::One(&n), &links());
        assert_eq!(
            body,
            json!({
                "topic": "jobs",
                "title": "Succeeded: Frühling ☀",
                "message": "replicate · abc 1 · 1m 1s",
                "priority": 3,
                "tags": ["white_check_mark"],
                "click": "https://hub.example/#/jobs/replicate/abc%201",
            })
        );
    }

    #[test]
    fn a_failure_is_high_priority_and_no_base_means_no_click() {
        let n = finished(8, JobState::Failed, "x");
        let body = publication("jobs", &Message::One(&n), &Links::default());
        assert_eq!(body["priority"], 4);
        assert_eq!(body["tags"], json!(["x"]));
        assert!(body.get("click").is_none(), "{body}");
    }

    #[test]
    fn a_summary_with_a_failure_is_urgent_and_links_to_the_list() {
        let summary = Summary::new(vec![finished(3, JobState::Succeeded, "a"), finished(4, JobState::Failed, "b")]);
        let body = publication("jobs", &Message::Summary(&summary), &links());
        assert_eq!(body["title"], "2 jobs finished while you were away");
        assert_eq!(body["message"], "1 failed, 1 succeeded");
        assert_eq!(body["priority"], 4);
        assert_eq!(body["tags"], json!(["warning"]));
        assert_eq!(body["click"], "https://hub.example/#/jobs");
    }

    #[test]
    fn a_result_is_attached_and_its_links_are_buttons() {
        let mut n = finished(9, JobState::Succeeded, "cat");
        n.result = Some(crate::store::job::JobResult {
            text: Some("a cat".into()),
            urls: vec!["https://files.example/cat.png".into()],
            image: Some("https://files.example/cat.png".into()),
        });
        n.provider_url = Some("https://replicate.com/p/abc".into());
        let body = publication("jobs", &Message::One(&n), &links());
        assert_eq!(body["message"], "replicate · abc 1 · 1m 1s\na cat");
        assert_eq!(body["attach"], "https://files.example/cat.png");
        assert_eq!(body["click"], "https://hub.example/#/jobs/replicate/abc%201");
        assert_eq!(
            body["actions"],
            json!([
                {"action": "view", "label": "Open in NeverMiss", "url": "https://hub.example/#/jobs/replicate/abc%201"},
                {"action": "view", "label": "Open result", "url": "https://files.example/cat.png"},
                {"action": "view", "label": "Open on provider", "url": "https://replicate.com/p/abc"},
            ])
        );
        // Without the UI's address, a tap opens the result.
        let body = publication("jobs", &Message::One(&n), &Links::default());
        assert_eq!(body["click"], "https://files.example/cat.png");
        assert_eq!(body["actions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_stuck_job_offers_cancel_as_its_page_with_the_question_never_an_http_action() {
        let mut n = finished(10, JobState::Running, "slow one");
        n.kind = Kind::Stuck;
        let body = publication("jobs", &Message::One(&n), &links());
        assert_eq!(body["priority"], 4);
        assert_eq!(
            body["actions"],
            json!([
                {"action": "view", "label": "Open in NeverMiss", "url": "https://hub.example/#/jobs/replicate/abc%201"},
                {"action": "view", "label": "Cancel…", "url": "https://hub.example/#/jobs/replicate/abc%201?ask=cancel"},
            ])
        );
        // Without the UI's address there is nowhere to ask: no button at all.
        assert!(publication("jobs", &Message::One(&n), &Links::default()).get("actions").is_none());
        // A finished job offers no cancel.
        let done = publication("jobs", &Message::One(&finished(11, JobState::Succeeded, "x")), &links());
        assert!(done.get("actions").is_none(), "{done}");
    }

    #[test]
    fn a_test_names_the_channel() {
        let body = publication("jobs", &Message::Test { channel: "phone" }, &Links::default());
        assert_eq!(body["title"], "NeverMiss test notification");
        assert!(body["message"].as_str().unwrap().contains("\"phone\""), "{body}");
        assert_eq!(body["priority"], 3);
        assert_eq!(body["tags"], json!(["bell"]));
    }
}
