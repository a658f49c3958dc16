//! The chat senders: a Slack incoming webhook and a Discord webhook, each the message as that
//! service formats it, posted to the URL the user copied from it (a secret: whoever has it can
//! post to the channel).
//!
//! - Slack (https://api.slack.com/messaging/webhooks): `text` (what the phone's notification and
//!   screen readers show) and one `section` block in mrkdwn (the title in bold, the text with the
//!   job's result line, the links as `<url|Open in NeverMiss>`, `<url|Open result>`,
//!   `<url|Open on provider>`); an urgent message also gets a red attachment bar (Slack colours
//!   only attachments); Slack answers `ok` as plain text.
//! - Discord (https://discord.com/developers/docs/resources/webhook#execute-webhook): one embed
//!   (title, description with the result line and links, url, a colour by outcome, red when
//!   urgent, the job's first image), mentions disabled (a job's label could say
//!   `@everyone`). Posted with `?wait=true`, so Discord answers the message it created (its id)
//!   after it is created, instead of a bare 204 before: "Send test" shows what Discord made of it,
//!   and a message Discord fails to create is an error here.
//!
//! Both rate-limit with a 429 and a `Retry-After`; the error says how long to wait.

use serde_json::{json, Value};

use super::{Answer, Links};
use crate::notification::{Message, NotifyError};
use crate::store::job::JobState;
use crate::store::outbox::Kind;
/// Slack's limit on a section's text; Discord's on an embed's title and description.
const SLACK_SECTION_MAX: usize = 3000;
const DISCORD_TITLE_MAX: usize = 256;
const DISCORD_DESCRIPTION_MAX: usize = 4096;

/// The embed's colours: green, red (urgent), grey (canceled, and anything else), blurple (a test).
const GREEN: u32 = 0x2EB67D;
const RED: u32 = 0xE01E5A;
const GREY: u32 = 0x95A5A6;
const BLURPLE: u32 = 0x5865F2;

/// Posts `message` to a Slack incoming webhook; answers Slack's status and text (`ok`).
pub async fn send_slack(http: &reqwest::Client, url: &str, message: &Message<'_>, links: &Links) -> Result<Answer, NotifyError> {
    super::post("Slack", http.post(url).json(&slack_body(message, links))).await
}

/// Posts `message` to a Discord webhook (with `?wait=true`); answers Discord's status and the
/// start of the message it created.
pub async fn send_discord(http: &reqwest::Client, url: &str, message: &Message<'_>, links: &Links) -> Result<Answer, NotifyError> {
    let mut url = reqwest::Url::parse(url).map_err(|e| NotifyError::channel(format!("the Discord webhook URL is not a URL: {e}")))?;
    if !url.query_pairs().any(|(k, _)| k == "wait") {
        url.query_pairs_mut().append_pair("wait", "true");
    }
    super::post("Discord", http.post(url).json(&discord_body(message, links))).await
}

/// The Slack payload: `text` (the notification's fallback) and one mrkdwn section.
pub fn slack_body(message: &Message<'_>, links: &Links) -> Value {
    let title = slack_escape(&message.title());
    let text = slack_escape(&message.body());
    let mut section = format!("*{title}*\n{text}");
    let shown: Vec<String> = links.for_actions(message, true).into_iter().map(|(label, url)| format!("<{url}|{label}>")).collect();
    if !shown.is_empty() {
        section.push_str(&format!("\n{}", shown.join(" · ")));
    }
    let mut body = json!({
        "text": format!("{title}\n{text}"),
        "blocks": [{
            "type": "section",
            "text": { "type": "mrkdwn", "text": cut(&section, SLACK_SECTION_MAX) },
        }],
    });
    if message.is_urgent() {
        body["attachments"] = json!([{ "color": format!("#{RED:06X}"), "fallback": title, "text": "Needs attention" }]);
    }
    body
}

/// The Discord payload: one embed, no mentions.
pub fn discord_body(message: &Message<'_>, links: &Links) -> Value {
    let mut description = message.body();
    let shown: Vec<String> = links.for_actions(message, false).into_iter().map(|(label, url)| format!("[{label}]({url})")).collect();
    if !shown.is_empty() {
        description.push_str(&format!("\n{}", shown.join(" · ")));
    }
    let mut embed = json!({
        "title": cut(&message.title(), DISCORD_TITLE_MAX),
        "description": cut(&description, DISCORD_DESCRIPTION_MAX),
        "color": colour(message),
    });
    if let Some(link) = links.of(message) {
        embed["url"] = Value::String(link);
    }
    if let Some(image) = message.image_url() {
        embed["image"] = json!({ "url": image });
    }
    json!({
        "embeds": [embed],
        "allowed_mentions": { "parse": [] },
    })
}

/// The embed's colour by outcome.
pub fn colour(message: &Message<'_>) -> u32 {
    match message {
        Message::Test { .. } => BLURPLE,
        _ if message.is_urgent() => RED,
        Message::One(n) if n.kind == Kind::Terminal && n.state == JobState::Succeeded => GREEN,
        Message::Summary(_) => GREEN,
        _ => GREY,
    }
}

/// Slack's mrkdwn control characters as its docs escape them.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// At most `max` characters, with an ellipsis when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max.saturating_sub(1)) {
        Some((at, _)) if text.chars().count() > max => format!("{}…", &text[..at]),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notification::{Notification, Summary};

    fn finished(outbox_id: i64, state: JobState, label: &str) -> Notification {
        crate::channels::finished_for_test(
            outbox_id,
            ("fal", "req/9"),
            state,
            label,
            (state == JobState::Failed).then_some("CUDA out of memory"),
            5_000,
        )
    }

    fn links() -> Links {
        Links { base: Some("https://hub.example".into()) }
    }

    #[test]
    fn slack_gets_text_and_one_mrkdwn_section_with_the_link() {
        let n = finished(1, JobState::Succeeded, "render <final> & co");
        let body = slack_body(&Message::One(&n), &links());
        assert_eq!(
            body,
            json!({
                "text": "Succeeded: render &lt;final&gt; &amp; co\nfal · req/9 · 5s",
                "blocks": [{
                    "type": "section",
                    "text": {
                        "type": "mrkdwn",
                        "text": "*Succeeded: render &lt;final&gt; &amp; co*\nfal · req/9 · 5s\n<https://hub.example/#/jobs/fal/req%2F9|Open in NeverMiss>",
                    },
                }],
            })
        );
    }

    #[test]
    fn slack_without_a_base_has_no_link() {
        let body = slack_body(&Message::Test { channel: "team" }, &Links::default());
        let section = body["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(section.starts_with("*NeverMiss test notification*\nThe channel \"team\" works"), "{section}");
        assert!(!section.contains('<'), "{section}");
    }

    #[test]
    fn discord_gets_one_embed_coloured_by_outcome_without_mentions() {
        let n = finished(2, JobState::Failed, "@everyone train");
        let body = discord_body(&Message::One(&n), &links());
        assert_eq!(
            body,
            json!({
                "embeds": [{
                    "title": "Failed: @everyone train",
                    "description": "fal · req/9 · 5s\nCUDA out of memory",
                    "url": "https://hub.example/#/jobs/fal/req%2F9",
                    "color": RED,
                }],
                "allowed_mentions": { "parse": [] },
            })
        );
        let ok = finished(3, JobState::Succeeded, "a");
        assert_eq!(discord_body(&Message::One(&ok), &Links::default())["embeds"][0]["color"], GREEN);
        assert!(discord_body(&Message::One(&ok), &Links::default())["embeds"][0].get("url").is_none());
        let canceled = finished(4, JobState::Canceled, "a");
        assert_eq!(colour(&Message::One(&canceled)), GREY);
        assert_eq!(colour(&Message::Test { channel: "x" }), BLURPLE);
    }

    #[test]
    fn a_summary_is_one_message_linking_to_the_list() {
        let summary = Summary::new(vec![finished(5, JobState::Succeeded, "a"), finished(6, JobState::Succeeded, "b")]);
        let discord = discord_body(&Message::Summary(&summary), &links());
        assert_eq!(discord["embeds"][0]["title"], "2 jobs finished while you were away");
        assert_eq!(discord["embeds"][0]["description"], "2 succeeded");
        assert_eq!(discord["embeds"][0]["url"], "https://hub.example/#/jobs");
        assert_eq!(discord["embeds"][0]["color"], GREEN);
        let slack = slack_body(&Message::Summary(&summary), &links());
        assert!(slack["blocks"][0]["text"]["text"].as_str().unwrap().ends_with("<https://hub.example/#/jobs|Open in NeverMiss>"));
    }

    /// A stuck job's alert links to the job with the cancel's question asked, after its other
    /// links, as ntfy's buttons do; a finished job's does not.
    #[test]
    fn a_stuck_alert_links_to_the_cancel_question() {
        let stuck = Notification {
            kind: Kind::Stuck,
            ..crate::channels::finished_for_test(7, ("replicate", "p-1"), JobState::Running, "render", None, 0)
        };
        let slack = slack_body(&Message::One(&stuck), &links());
        let section = slack["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(
            section.ends_with("<https://hub.example/#/jobs/replicate/p-1|Open in NeverMiss> · <https://hub.example/#/jobs/replicate/p-1?ask=cancel|Cancel…>"),
            "{section}"
        );
        let discord = discord_body(&Message::One(&stuck), &links());
        let description = discord["embeds"][0]["description"].as_str().unwrap();
        assert!(description.ends_with("\n[Cancel…](https://hub.example/#/jobs/replicate/p-1?ask=cancel)"), "{description}");
        assert_eq!(discord["embeds"][0]["url"], "https://hub.example/#/jobs/replicate/p-1");
        let done = finished(8, JobState::Succeeded, "a");
        assert!(!slack_body(&Message::One(&done), &links()).to_string().contains("ask=cancel"));
    }

    #[test]
    fn long_texts_are_cut_to_the_services_limits() {
        let long = "x".repeat(5000);
        assert_eq!(cut(&long, 256).chars().count(), 256);
        assert!(cut(&long, 256).ends_with('…'));
        assert_eq!(cut("short", 256), "short");
        assert_eq!(cut(&"é".repeat(256), 256), "é".repeat(256));
    }
}
