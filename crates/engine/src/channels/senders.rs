//! `Channels`: sends a message to one channel, whatever its kind, with the channel's fields and
//! its secrets from the secret store. The dispatcher (`outbox`) and "Send test" both go
//! through `Channels::send`.

use std::sync::Arc;
use std::time::Duration;

use super::config::ChannelConfig;
use super::{chat, desktop, email, ntfy, webhook, Answer, Links};
use crate::extra_ca::ExtraRoots;
use crate::notification::{Message, Notifier, NotifyError, Pending};
use crate::secrets::{Named, Secrets};
use crate::settings::{Settings, UI_URL};
use crate::store::channels::{ChannelKind, ChannelRow};
use crate::store::job::JobKey;
use crate::store::{self, Store, StoreError};

/// How long one HTTP send may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Every channel's sender.
pub struct Channels {
    desktop: Arc<dyn Notifier>,
    http: reqwest::Client,
    secrets: Arc<Secrets>,
    settings: Arc<Settings>,
    /// This engine's admin API (`http://127.0.0.1:8788`): where links point unless the
    /// `ui_url` setting says otherwise.
    api_url: String,
    /// Trusted besides the public roots, over HTTP and SMTP (a self-hosted server).
    extra_roots: ExtraRoots,
}

impl Channels {
    pub fn new(
        desktop: Arc<dyn Notifier>,
        secrets: Arc<Secrets>,
        settings: Arc<Settings>,
        api_url: String,
        extra_roots: ExtraRoots,
    ) -> Arc<Channels> {
        let builder = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("NeverMiss/", env!("CARGO_PKG_VERSION")));
        let http = extra_roots.trusted_by(builder).build().expect("an HTTP client with rustls builds");
        Arc::new(Channels { desktop, http, secrets, settings, api_url, extra_roots })
    }

    /// Where links in messages point: the `ui_url` setting (a hub's public address), else this
    /// engine's admin API.
    pub fn links(&self) -> Links {
        let base = self.settings.get(UI_URL).filter(|u| !u.trim().is_empty()).unwrap_or_else(|| self.api_url.clone());
        Links { base: Some(base) }
    }

    /// A channel's secret field, read off the async runtime (the keychain is a blocking call).
    pub async fn secret(&self, channel: &str, field: &'static str) -> Option<String> {
        let secrets = self.secrets.clone();
        let named = Named::channel(channel, field);
        tokio::task::spawn_blocking(move || secrets.get_named(&named)).await.ok().flatten()
    }

    async fn required_secret(&self, channel: &ChannelRow, field: &'static str) -> Result<String, NotifyError> {
        self.secret(&channel.name, field)
            .await
            .ok_or_else(|| NotifyError::channel(format!("the channel has no {field} (set it in Settings, Channels)")))
    }

    /// Sends `message` to `channel`; answers what the channel answered.
    pub async fn send(&self, channel: &ChannelRow, message: &Message<'_>) -> Result<Answer, NotifyError> {
        let links = self.links();
        let config = ChannelConfig::checked(channel)
            .map_err(|e| NotifyError::channel(format!("the channel cannot send: {e} (set it in Settings, Channels)")))?;
        match config {
            ChannelConfig::Desktop => desktop::send(&*self.desktop, message).await,
            ChannelConfig::Device => Err(NotifyError::channel("a device takes its notifications from the hub when it is connected")),
            ChannelConfig::Webhook(webhook) => {
                let secret = self.required_secret(channel, "secret").await?;
                webhook::send(&self.http, &webhook.url, &secret, message, &links).await
            }
            ChannelConfig::Ntfy(ntfy) => {
                let token = self.secret(&channel.name, "token").await;
                ntfy::send(&self.http, &ntfy.url, token.as_deref(), message, &links).await
            }
            ChannelConfig::Slack => {
                let url = self.required_secret(channel, "url").await?;
                chat::send_slack(&self.http, &url, message, &links).await
            }
            ChannelConfig::Discord => {
                let url = self.required_secret(channel, "url").await?;
                chat::send_discord(&self.http, &url, message, &links).await
            }
            ChannelConfig::Email(email) => {
                let password = self.secret(&channel.name, "password").await;
                email::send(&email, password.as_deref(), &self.extra_roots, message, &links).await
            }
        }
    }

    /// Fills in the job of every row bound for a webhook channel (it sends the job whole).
    pub(crate) async fn add_jobs(&self, store: &Store, due: &mut [Pending], channels: &[ChannelRow]) -> Result<(), StoreError> {
        let wanted: Vec<(usize, String, String)> = due
            .iter()
            .enumerate()
            .filter(|(_, row)| channels.iter().any(|c| c.name == row.channel && c.kind == ChannelKind::Webhook))
            .filter_map(|(i, row)| row.notification.job().map(|(p, j)| (i, p.to_owned(), j.to_owned())))
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let jobs = store
            .read(move |db| {
                wanted
                    .iter()
                    .map(|(i, provider, job_id)| Ok((*i, store::jobs::job(db, &JobKey::new(provider, job_id))?)))
                    .collect::<store::sql::Result<Vec<_>>>()
            })
            .await?;
        for (i, job) in jobs {
            due[i].notification.job = job;
        }
        Ok(())
    }
}
