//! The e-mail sender: one plain-text message over SMTP (lettre), to the channel's addresses.
//!
//! The subject is the message's title (prefixed `URGENT_PREFIX` when urgent); the text is its
//! body (with the job's result line), a summary's jobs one per line under its counts, the links
//! to the job's result and its provider's page when known, and the link to the web UI when it has
//! an address. The connection is plain
//! (a local relay), upgraded with STARTTLS (submission, 587) or TLS from the first byte (465),
//! as the channel says (`EmailTls`); TLS is rustls with the Mozilla roots and the user's extra
//! roots (`crate::extra_ca`). With TLS asked for, nothing goes in plain text: a server that does
//! not offer STARTTLS, or whose certificate does not verify, is an error before any login or
//! message. The answer is the server's last reply to the message ("250 2.0.0 Ok: queued as 4Bx...").

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::config::EmailConfig;
use super::{Answer, EmailTls, Links};
use crate::extra_ca::ExtraRoots;
use crate::notification::{Message, NotifyError};

/// How long one send may take, connection to last reply (and each step of it).
const TIMEOUT: Duration = Duration::from_secs(15);

/// Sends `message` to the channel's recipients, trusting `extra_roots` besides the public roots
/// with TLS; answers the SMTP server's reply to it, or an error naming the server and what went
/// wrong (connection, TLS, login, a refused address).
pub async fn send(
    config: &EmailConfig,
    password: Option<&str>,
    extra_roots: &ExtraRoots,
    message: &Message<'_>,
    links: &Links,
) -> Result<Answer, NotifyError> {
    let (from, to) = config.mailboxes().map_err(|e| NotifyError::channel(e.to_string()))?;
    let mut email = lettre::Message::builder().from(from).subject(subject(message)).header(ContentType::TEXT_PLAIN);
    for to in to {
        email = email.to(to);
    }
    let email = email.body(text(message, links)).map_err(|e| NotifyError::refused(format!("the e-mail cannot be built: {e}")))?;

    let server = format!("{}:{}", config.host, config.port());
    let tls_to_host = || tls_parameters(&config.host, extra_roots).map_err(|e| NotifyError::channel(format!("SMTP {server}: {e}")));
    let tls = match config.tls {
        EmailTls::None => Tls::None,
        // `Required`, not `Opportunistic`: a server that offers no STARTTLS is an error.
        EmailTls::Starttls => Tls::Required(tls_to_host()?),
        EmailTls::Tls => Tls::Wrapper(tls_to_host()?),
    };
    let mut builder =
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&config.host).tls(tls).port(config.port()).timeout(Some(TIMEOUT));
    if let Some(username) = config.username.as_deref().filter(|u| !u.is_empty()) {
        builder = builder.credentials(Credentials::new(username.to_owned(), password.unwrap_or_default().to_owned()));
    }
    let transport = builder.build();
    let response = match tokio::time::timeout(TIMEOUT, transport.send(email)).await {
        Err(_) => return Err(NotifyError::channel(format!("SMTP {server}: no answer within {}s", TIMEOUT.as_secs()))),
        Ok(Err(e)) if refuses_the_message(&e) => return Err(NotifyError::refused(format!("SMTP {server}: {e}"))),
        Ok(Err(e)) => return Err(NotifyError::channel(format!("SMTP {server}: {e}"))),
        Ok(Ok(response)) => response,
    };
    Ok(format!("{} {}", response.code(), response.message().collect::<Vec<_>>().join(" ")))
}

/// Whether the server answered and refused this message (a permanent 5xx reply to its sender,
/// a recipient or its content), rather than the connection or the login (530 to 539: the
/// channel's, every message would get it).
fn refuses_the_message(e: &lettre::transport::smtp::Error) -> bool {
    let login_refused = e.status().map(u16::from).is_some_and(|code| (530..540).contains(&code));
    e.is_permanent() && !login_refused
}

/// TLS to `host`, its certificate checked against the public roots and `extra_roots`.
fn tls_parameters(host: &str, extra_roots: &ExtraRoots) -> Result<TlsParameters, lettre::transport::smtp::Error> {
    let mut builder = TlsParameters::builder(host.to_owned());
    for der in extra_roots.der() {
        builder = builder.add_root_certificate(Certificate::from_der(der.to_vec())?);
    }
    builder.build()
}

/// What an urgent message's subject starts with (a failed job, one waiting for input, a stuck
/// one, the tunnel down), so a mail filter or a glance at the inbox tells it apart.
pub const URGENT_PREFIX: &str = "[Action needed] ";

/// The subject: the message's title, prefixed when urgent.
pub fn subject(message: &Message<'_>) -> String {
    if message.is_urgent() {
        format!("{URGENT_PREFIX}{}", message.title())
    } else {
        message.title()
    }
}

/// The plain text: the message's body; a summary's notifications one per line under its counts;
/// the link when there is one.
pub fn text(message: &Message<'_>, links: &Links) -> String {
    let mut text = message.body();
    if let Message::Summary(summary) = message {
        text.push_str("\n\n");
        for n in &summary.notifications {
            text.push_str(&format!("- {}\n", n.title()));
        }
    }
    let shown = links.for_actions(message, true);
    if !shown.is_empty() {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push('\n');
        for (label, url) in shown {
            text.push_str(&format!("{}: {url}\n", label.trim_end_matches('…')));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notification::{Notification, Summary};
    use crate::store::job::JobState;
    use crate::store::outbox::Kind;

    fn finished(outbox_id: i64, state: JobState, label: &str) -> Notification {
        crate::channels::finished_for_test(outbox_id, ("anthropic", "msgbatch_1"), state, label, None, 3_600_000)
    }

    #[test]
    fn one_job_is_its_title_body_and_link() {
        let n = finished(1, JobState::Succeeded, "embeddings");
        let links = Links { base: Some("https://hub.example".into()) };
        assert_eq!(subject(&Message::One(&n)), "Succeeded: embeddings");
        assert_eq!(
            text(&Message::One(&n), &links),
            "anthropic · msgbatch_1 · 1h 0m\n\nOpen in NeverMiss: https://hub.example/#/jobs/anthropic/msgbatch_1\n"
        );
        assert_eq!(text(&Message::One(&n), &Links::default()), "anthropic · msgbatch_1 · 1h 0m");
    }

    #[test]
    fn a_result_and_its_links_are_in_the_text_and_an_urgent_subject_is_prefixed() {
        let mut n = finished(1, JobState::Succeeded, "render");
        n.result = Some(crate::store::job::JobResult {
            text: Some("a cat".into()),
            urls: vec!["https://files.example/cat.png".into()],
            image: None,
        });
        n.provider_url = Some("https://replicate.com/p/abc".into());
        let links = Links { base: Some("https://hub.example".into()) };
        assert_eq!(
            text(&Message::One(&n), &links),
            "anthropic · msgbatch_1 · 1h 0m\na cat\n\nOpen in NeverMiss: https://hub.example/#/jobs/anthropic/msgbatch_1\nOpen result: https://files.example/cat.png\nOpen on provider: https://replicate.com/p/abc\n"
        );
        // A stuck job's alert links to the job with the cancel's question asked.
        let stuck = Notification {
            kind: Kind::Stuck,
            ..crate::channels::finished_for_test(3, ("replicate", "p-1"), JobState::Running, "render", None, 0)
        };
        let stuck_text = text(&Message::One(&stuck), &links);
        assert!(stuck_text.ends_with("Cancel: https://hub.example/#/jobs/replicate/p-1?ask=cancel\n"), "{stuck_text}");
        assert_eq!(subject(&Message::One(&n)), "Succeeded: render");
        for state in [JobState::Failed, JobState::NeedsInput, JobState::Ended] {
            assert_eq!(
                subject(&Message::One(&finished(2, state, "render"))),
                format!("{URGENT_PREFIX}{}", finished(2, state, "render").title())
            );
        }
    }

    #[test]
    fn a_summary_lists_each_job_under_the_counts() {
        let summary = Summary::new(vec![
            finished(1, JobState::Succeeded, "a"),
            finished(2, JobState::Failed, "b"),
            finished(3, JobState::Succeeded, "c"),
        ]);
        let links = Links { base: Some("https://hub.example".into()) };
        assert_eq!(subject(&Message::Summary(&summary)), "[Action needed] 3 jobs finished while you were away", "one of them failed");
        assert_eq!(
            text(&Message::Summary(&summary), &links),
            "2 succeeded, 1 failed\n\n- Succeeded: a\n- Failed: b\n- Succeeded: c\n\nOpen in NeverMiss: https://hub.example/#/jobs\n"
        );
    }
}
