//! bore, through the `bore-cli` crate used as a library: a control connection to the user's bore
//! server (`host`, control port 7835, optional secret), which opens a public TCP port there and
//! forwards each connection to the receiver on loopback. Plain TCP: the public URL is
//! `http://host:port`, so most senders want TLS in front of the server.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use bore_cli::client::Client;
use tokio::task::JoinHandle;

use super::config::{parse_bore_server, TunnelConfig};
use super::session::{Opened, Session, TunnelError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

pub async fn open(cfg: &TunnelConfig, local: SocketAddr) -> Result<Opened, TunnelError> {
    let server = cfg.bore_server.as_deref().unwrap_or("");
    let (host, port) = parse_bore_server(server).map_err(TunnelError::Setup)?;
    let local_host = local.ip().to_string();
    let connect = Client::new(&local_host, local.port(), &host, port, cfg.bore_secret.as_deref());
    let client = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => return Err(TunnelError::Failed(format!("bore server {host}: {e:#}"))),
        Err(_) => return Err(TunnelError::Failed(format!("bore server {host} did not answer within {}s", CONNECT_TIMEOUT.as_secs()))),
    };
    let remote_port = client.remote_port();
    let url_host = if host.contains(':') { format!("[{host}]") } else { host.clone() };
    let url = format!("http://{url_host}:{remote_port}");
    tracing::info!(%url, "bore tunnel is up");
    let task = tokio::spawn(client.listen());
    Ok(Opened { url, session: Box::new(BoreSession { task: Some(task), host }) })
}

struct BoreSession {
    task: Option<JoinHandle<anyhow::Result<()>>>,
    host: String,
}

#[async_trait]
impl Session for BoreSession {
    async fn ended(&mut self) -> String {
        let Some(task) = self.task.as_mut() else {
            return "bore is not running".into();
        };
        let reason = match task.await {
            Ok(Ok(())) => format!("the bore server {} closed the connection", self.host),
            Ok(Err(e)) => format!("bore connection to {} lost: {e:#}", self.host),
            Err(e) => format!("bore client failed: {e}"),
        };
        self.task = None;
        reason
    }

    async fn stop(mut self: Box<Self>) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}
