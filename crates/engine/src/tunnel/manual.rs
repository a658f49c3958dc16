//! `manual`: the user's own public URL (a reverse proxy, Tailscale Funnel, a VPS) that forwards to
//! the receiver. Nothing runs here; it is shown and self-tested like the others, and a failing
//! self-test is a warning (a restart could change nothing).

use async_trait::async_trait;

use super::config::{check_public_url, TunnelConfig};
use super::session::{Opened, Session, TunnelError};

pub fn open(cfg: &TunnelConfig) -> Result<Opened, TunnelError> {
    let url = cfg.public_url.as_deref().ok_or_else(|| {
        TunnelError::Setup("no public URL for the manual tunnel (NEVERMISS_PUBLIC_URL or the setting tunnel.public_url)".into())
    })?;
    let url = check_public_url(url).map_err(TunnelError::Setup)?;
    Ok(Opened { url: url.to_owned(), session: Box::new(ManualSession) })
}

struct ManualSession;

#[async_trait]
impl Session for ManualSession {
    async fn ended(&mut self) -> String {
        std::future::pending().await
    }

    async fn stop(self: Box<Self>) {}

    fn restartable(&self) -> bool {
        false
    }
}
