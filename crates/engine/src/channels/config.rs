//! A channel's configuration, typed: one variant per kind with its non-secret fields (stored as
//! the `config` JSON of its `channels` row, the kind in its own column), the kinds' secret fields
//! (kept in the secret store), and `validate`, the one check the admin API runs before it saves a
//! channel and the senders run before they send.

use lettre::message::Mailbox;
use serde::{Deserialize, Serialize};

use super::EmailTls;
use crate::store::channels::{ChannelKind, ChannelRow};

/// A channel's non-secret fields, by kind. Serialized tagged by `kind`; stored without the tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ChannelConfig {
    Desktop,
    Device,
    Webhook(WebhookConfig),
    Ntfy(NtfyConfig),
    /// Its URL is its secret.
    Slack,
    /// Its URL is its secret.
    Discord,
    Email(EmailConfig),
}

/// A signed webhook's address (its `whsec_` secret is in the secret store).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebhookConfig {
    pub url: String,
}

/// An ntfy topic's URL, as ntfy shows it (`https://ntfy.sh/mytopic`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NtfyConfig {
    pub url: String,
}

/// An e-mail channel's SMTP server and addresses (its password is in the secret store).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EmailConfig {
    /// The SMTP server's host name (checked against its certificate with TLS).
    pub host: String,
    /// None: the port its TLS mode is served on (`port()`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub tls: EmailTls,
    /// Who to log in as; no login without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The sender, an address or `Name <address>`.
    pub from: String,
    /// The recipients, separated by commas.
    pub to: String,
}

impl EmailConfig {
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(self.tls.default_port())
    }

    /// The recipients in `to`, trimmed, empty ones left out.
    pub fn recipients(&self) -> Vec<&str> {
        self.to.split(',').map(str::trim).filter(|a| !a.is_empty()).collect()
    }

    /// The sender's and the recipients' mailboxes, or every field that is wrong.
    pub fn mailboxes(&self) -> Result<(Mailbox, Vec<Mailbox>), ConfigErrors> {
        let mut errors = Vec::new();
        if self.host.trim().is_empty() {
            errors.push(FieldError::new("host", Problem::Required));
        }
        if self.port == Some(0) {
            errors.push(FieldError::new("port", Problem::BadPort));
        }
        let from = match self.from.trim() {
            "" => Err(Problem::Required),
            from => mailbox(from),
        };
        let to = if self.to.trim().is_empty() {
            Err(Problem::Required)
        } else if self.recipients().is_empty() {
            Err(Problem::NoRecipient)
        } else {
            self.recipients().into_iter().map(mailbox).collect()
        };
        match (from, to) {
            (Ok(from), Ok(to)) if errors.is_empty() => Ok((from, to)),
            (from, to) => {
                errors.extend(from.err().map(|p| FieldError::new("from", p)));
                errors.extend(to.err().map(|p| FieldError::new("to", p)));
                Err(ConfigErrors(errors))
            }
        }
    }
}

fn mailbox(text: &str) -> Result<Mailbox, Problem> {
    text.parse::<Mailbox>().map_err(|e| Problem::NotAnAddress { text: text.to_owned(), why: e.to_string() })
}

/// What is wrong with one field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("is required")]
    Required,
    #[error("must be an http:// or https:// address")]
    NotHttp,
    #[error("must name the topic, like https://ntfy.sh/my-jobs")]
    NoTopic,
    #[error("must be a port between 1 and 65535")]
    BadPort,
    #[error("is not an e-mail address: {text:?} ({why})")]
    NotAnAddress { text: String, why: String },
    #[error("names no recipient")]
    NoRecipient,
    #[error("must start with whsec_ (a Standard Webhooks secret)")]
    NotWhsec,
    #[error("must be base64 after whsec_")]
    NotBase64,
    #[error("is too short: at least 16 bytes after whsec_")]
    TooShort,
}

/// A field and what is wrong with it ("url must be an http:// or https:// address").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct FieldError {
    pub field: &'static str,
    pub problem: Problem,
}

impl FieldError {
    pub fn new(field: &'static str, problem: Problem) -> FieldError {
        FieldError { field, problem }
    }
}

/// Every field of a configuration that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct ConfigErrors(pub Vec<FieldError>);

/// Why a stored channel cannot send.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("its stored settings cannot be read ({0})")]
    Unreadable(#[from] serde_json::Error),
    #[error(transparent)]
    Invalid(#[from] ConfigErrors),
}

impl ChannelConfig {
    pub fn kind(&self) -> ChannelKind {
        match self {
            ChannelConfig::Desktop => ChannelKind::Desktop,
            ChannelConfig::Device => ChannelKind::Device,
            ChannelConfig::Webhook(_) => ChannelKind::Webhook,
            ChannelConfig::Ntfy(_) => ChannelKind::Ntfy,
            ChannelConfig::Slack => ChannelKind::Slack,
            ChannelConfig::Discord => ChannelKind::Discord,
            ChannelConfig::Email(_) => ChannelKind::Email,
        }
    }

    /// A stored row's configuration: its kind and its `config` JSON (fields left out take
    /// their defaults; fields no kind has are ignored).
    pub fn of(row: &ChannelRow) -> Result<ChannelConfig, serde_json::Error> {
        let mut tagged = row.config.clone();
        tagged.insert("kind".into(), row.kind.as_str().into());
        serde_json::from_value(serde_json::Value::Object(tagged))
    }

    /// A stored row's configuration, checked (what a sender takes).
    pub fn checked(row: &ChannelRow) -> Result<ChannelConfig, ConfigError> {
        let config = ChannelConfig::of(row)?;
        config.validate()?;
        Ok(config)
    }

    /// The `config` JSON of its row (without the kind: that is the row's own column).
    pub fn to_stored(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut map = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => unreachable!("a tagged enum of structs serializes to an object"),
        };
        map.remove("kind");
        map
    }

    /// Every field that is wrong: a required one empty, an address that is not http(s), an ntfy
    /// URL without its topic, a port 0, an e-mail address that does not parse.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let errors = match self {
            ChannelConfig::Desktop | ChannelConfig::Device | ChannelConfig::Slack | ChannelConfig::Discord => Vec::new(),
            ChannelConfig::Webhook(c) => http_url(&c.url).err().map(|p| FieldError::new("url", p)).into_iter().collect(),
            ChannelConfig::Ntfy(c) => match http_url(&c.url) {
                Ok(url) if url.path().trim_matches('/').is_empty() => vec![FieldError::new("url", Problem::NoTopic)],
                Ok(_) => Vec::new(),
                Err(p) => vec![FieldError::new("url", p)],
            },
            ChannelConfig::Email(c) => c.mailboxes().err().map(|e| e.0).unwrap_or_default(),
        };
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(errors))
        }
    }
}

/// A kind's secret field: kept in the secret store, never answered back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretField {
    pub name: &'static str,
    /// The kind cannot send without it.
    pub required: bool,
}

/// The secret fields of each kind.
pub fn secret_fields(kind: ChannelKind) -> &'static [SecretField] {
    match kind {
        ChannelKind::Webhook => &[SecretField { name: "secret", required: true }],
        ChannelKind::Ntfy => &[SecretField { name: "token", required: false }],
        ChannelKind::Slack | ChannelKind::Discord => &[SecretField { name: "url", required: true }],
        ChannelKind::Email => &[SecretField { name: "password", required: false }],
        ChannelKind::Desktop | ChannelKind::Device => &[],
    }
}

/// Whether `value` can be a `kind` channel's secret `field`: a webhook's Standard Webhooks
/// secret (`whsec_` and at least 16 bytes of base64), a chat webhook's http(s) URL.
pub fn check_secret(kind: ChannelKind, field: &str, value: &str) -> Result<(), Problem> {
    match (kind, field) {
        (ChannelKind::Webhook, "secret") => check_whsec(value),
        (ChannelKind::Slack | ChannelKind::Discord, "url") => http_url(value).map(drop),
        _ => Ok(()),
    }
}

fn http_url(text: &str) -> Result<reqwest::Url, Problem> {
    let text = text.trim();
    if text.is_empty() {
        return Err(Problem::Required);
    }
    match reqwest::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Ok(url),
        _ => Err(Problem::NotHttp),
    }
}

fn check_whsec(secret: &str) -> Result<(), Problem> {
    use base64::Engine;
    let key = secret.strip_prefix("whsec_").ok_or(Problem::NotWhsec)?;
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(bytes) if bytes.len() >= 16 => Ok(()),
        Ok(_) => Err(Problem::TooShort),
        Err(_) => Err(Problem::NotBase64),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(kind: ChannelKind, config: serde_json::Value) -> ChannelRow {
        ChannelRow { config: config.as_object().cloned().unwrap(), ..ChannelRow::new("c", kind) }
    }

    fn email(host: &str, from: &str, to: &str) -> EmailConfig {
        EmailConfig { host: host.into(), from: from.into(), to: to.into(), ..EmailConfig::default() }
    }

    /// The `config` JSON each kind was stored with before it was typed loads, and is stored
    /// back the same (an e-mail row's port included).
    #[test]
    fn rows_in_the_stored_format_load_and_store_back_the_same() {
        let stored = [
            (ChannelKind::Desktop, json!({}), ChannelConfig::Desktop),
            (ChannelKind::Device, json!({}), ChannelConfig::Device),
            (ChannelKind::Slack, json!({}), ChannelConfig::Slack),
            (ChannelKind::Discord, json!({}), ChannelConfig::Discord),
            (
                ChannelKind::Webhook,
                json!({"url": "https://hooks.example/x"}),
                ChannelConfig::Webhook(WebhookConfig { url: "https://hooks.example/x".into() }),
            ),
            (
                ChannelKind::Ntfy,
                json!({"url": "https://ntfy.sh/my-jobs"}),
                ChannelConfig::Ntfy(NtfyConfig { url: "https://ntfy.sh/my-jobs".into() }),
            ),
            (
                ChannelKind::Email,
                json!({"host": "smtp.example.com", "port": 465, "tls": "tls", "username": "me", "from": "a@example.com", "to": "b@example.com, c@example.com"}),
                ChannelConfig::Email(EmailConfig {
                    port: Some(465),
                    tls: EmailTls::Tls,
                    username: Some("me".into()),
                    ..email("smtp.example.com", "a@example.com", "b@example.com, c@example.com")
                }),
            ),
        ];
        for (kind, json, expected) in stored {
            let config = ChannelConfig::of(&row(kind, json.clone())).unwrap();
            assert_eq!(config, expected, "{kind}");
            assert_eq!(config.kind(), kind);
            assert_eq!(serde_json::Value::Object(config.to_stored()), json, "{kind}");
            config.validate().unwrap();
        }
    }

    #[test]
    fn an_email_row_without_port_or_tls_takes_the_defaults() {
        let fields = json!({"host": "smtp.example.com", "from": "a@example.com", "to": "b@example.com"});
        let Ok(ChannelConfig::Email(config)) = ChannelConfig::of(&row(ChannelKind::Email, fields.clone())) else { panic!() };
        assert_eq!((config.tls, config.port()), (EmailTls::Starttls, 587));
        for (tls, port) in [("none", 25), ("starttls", 587), ("tls", 465)] {
            let mut fields = fields.clone();
            fields["tls"] = tls.into();
            let Ok(ChannelConfig::Email(config)) = ChannelConfig::of(&row(ChannelKind::Email, fields)) else { panic!() };
            assert_eq!(config.port(), port, "{tls}");
        }
    }

    #[test]
    fn unknown_fields_are_ignored_and_a_wrong_type_is_an_error() {
        let config = ChannelConfig::of(&row(ChannelKind::Desktop, json!({"url": "left over"}))).unwrap();
        assert_eq!(config, ChannelConfig::Desktop);
        assert!(ChannelConfig::of(&row(ChannelKind::Email, json!({"port": "many"}))).is_err());
        let e = ChannelConfig::checked(&row(ChannelKind::Webhook, json!({}))).unwrap_err();
        assert_eq!(e.to_string(), "url is required");
    }

    #[test]
    fn urls_are_checked_by_kind() {
        let webhook = |url: &str| ChannelConfig::Webhook(WebhookConfig { url: url.into() }).validate();
        let ntfy = |url: &str| ChannelConfig::Ntfy(NtfyConfig { url: url.into() }).validate();
        assert!(webhook("http://127.0.0.1:9/x").is_ok());
        assert_eq!(webhook(" ").unwrap_err().to_string(), "url is required");
        assert_eq!(webhook("ftp://x").unwrap_err().0, [FieldError::new("url", Problem::NotHttp)]);
        assert!(ntfy("https://ntfy.sh/jobs").is_ok());
        assert_eq!(ntfy("https://ntfy.sh/").unwrap_err().0, [FieldError::new("url", Problem::NoTopic)]);
    }

    #[test]
    fn an_email_config_names_every_wrong_field() {
        ChannelConfig::Email(email("smtp.example", "NeverMiss <nevermiss@example.com>", "me@example.com")).validate().unwrap();
        let fields = |config: EmailConfig| -> Vec<&'static str> {
            ChannelConfig::Email(config).validate().unwrap_err().0.iter().map(|e| e.field).collect()
        };
        assert_eq!(fields(EmailConfig::default()), ["host", "from", "to"]);
        assert_eq!(fields(EmailConfig { port: Some(0), ..email("h", "a@example.com", "b@example.com") }), ["port"]);
        let errors = ChannelConfig::Email(email("h", "not an address", "me@")).validate().unwrap_err();
        assert!(errors.to_string().starts_with("from is not an e-mail address: \"not an address\""), "{errors}");
        assert!(errors.to_string().contains("; to is not an e-mail address: \"me@\""), "{errors}");
        assert_eq!(ChannelConfig::Email(email("h", "a@example.com", " , ")).validate().unwrap_err().to_string(), "to names no recipient");
        assert_eq!(email("h", "a", " me@example.com,Ops <ops@example.org> , ,").recipients(), ["me@example.com", "Ops <ops@example.org>"]);
    }

    #[test]
    fn secrets_are_checked_by_kind() {
        assert!(check_secret(ChannelKind::Webhook, "secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        assert_eq!(check_secret(ChannelKind::Webhook, "secret", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), Err(Problem::NotWhsec));
        assert_eq!(check_secret(ChannelKind::Webhook, "secret", "whsec_!!!"), Err(Problem::NotBase64));
        assert_eq!(check_secret(ChannelKind::Webhook, "secret", "whsec_c2hvcnQ="), Err(Problem::TooShort));
        assert_eq!(check_secret(ChannelKind::Slack, "url", "hooks.slack.com/x"), Err(Problem::NotHttp));
        assert!(check_secret(ChannelKind::Ntfy, "token", "anything").is_ok());
        let required = |kind| secret_fields(kind).iter().filter(|f| f.required).map(|f| f.name).collect::<Vec<_>>();
        assert_eq!(required(ChannelKind::Webhook), ["secret"]);
        assert_eq!(required(ChannelKind::Discord), ["url"]);
        assert!(required(ChannelKind::Email).is_empty());
    }
}
