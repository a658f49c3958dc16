//! cloudflared as a child process. A quick tunnel (no account):
//! `cloudflared tunnel --url http://127.0.0.1:PORT --no-autoupdate --metrics 127.0.0.1:MPORT`; its
//! URL read from the metrics server (`GET /quicktunnel` → `{"hostname":"..."}`), readiness from
//! `GET /ready` (200 once a connection is up); the URL printed on stderr only as a fallback. A named
//! tunnel: `cloudflared tunnel ... run` with the token in `TUNNEL_TOKEN` (never on the command line)
//! and the user's hostname as the URL. While it runs, `/ready` is checked: a process that stays
//! unready is restarted.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::time::Instant;

use super::child_process::{free_loopback_port, ChildProcess, Output, Running};
use super::config::TunnelConfig;
use super::session::{Opened, Session, TunnelError};

/// How long a start may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(250);
const INSTALL_HINT: &str = "install cloudflared, or set NEVERMISS_CLOUDFLARED_PATH (setting tunnel.cloudflared_path) to where it is";

pub async fn open(cfg: &TunnelConfig, local: SocketAddr, http: &reqwest::Client) -> Result<Opened, TunnelError> {
    let named = match (&cfg.cloudflared_token, &cfg.cloudflared_hostname) {
        (Some(token), Some(host)) => Some((token.clone(), host.clone())),
        (None, None) => None,
        (Some(_), None) => {
            return Err(TunnelError::Setup(
                "a named cloudflared tunnel needs its hostname (NEVERMISS_CLOUDFLARED_HOSTNAME or the setting tunnel.cloudflared_hostname)".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(TunnelError::Setup(
                "a named cloudflared tunnel needs its token (NEVERMISS_CLOUDFLARED_TOKEN or the secret store); clear tunnel.cloudflared_hostname for a quick tunnel".into(),
            ))
        }
    };
    let metrics_port = free_loopback_port()?;
    let metrics = format!("127.0.0.1:{metrics_port}");
    let local = format!("http://{local}");
    let mut args: Vec<String> = vec!["tunnel".into(), "--no-autoupdate".into(), "--metrics".into(), metrics.clone()];
    let mut envs: Vec<(&str, &str)> = Vec::new();
    if let Some((token, _)) = &named {
        args.extend(["run".into(), "--url".into(), local]);
        envs.push(("TUNNEL_TOKEN", token.as_str()));
    } else {
        args.extend(["--url".into(), local]);
    }
    // A stray TUNNEL_TOKEN in NeverMiss's own environment must not turn a quick tunnel into
    // someone's named one.
    let remove: &[&str] = if named.is_some() { &[] } else { &["TUNNEL_TOKEN"] };
    let child = ChildProcess::spawn("cloudflared", &cfg.cloudflared_path, &args, &envs, remove, parse_line, INSTALL_HINT)?;

    let base = format!("http://{metrics}");
    let fixed_url = named.as_ref().map(|(_, host)| format!("https://{}", host.trim_end_matches('/')));
    let output = child.output.clone();
    let discover = async {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut metrics_answered = false;
        loop {
            let url = match &fixed_url {
                Some(u) => Some(u.clone()),
                None => quick_tunnel_url(http, &base).await.or_else(|| output.lock().unwrap().url.clone()),
            };
            let ready = match is_ready(http, &base).await {
                Some(ready) => {
                    metrics_answered = true;
                    ready
                }
                None => output.lock().unwrap().ready,
            };
            if let (Some(url), true) = (url, ready) {
                return Ok((url, metrics_answered));
            }
            if Instant::now() >= deadline {
                return Err(output.lock().unwrap().gave_up("cloudflared gave no ready tunnel", START_TIMEOUT));
            }
            tokio::time::sleep(POLL).await;
        }
    };
    let (program, (url, metrics_answered)) = Running::start(child, discover).await?;
    tracing::info!(%url, pid = ?program.id(), metrics_answered, "cloudflared tunnel is up");
    Ok(Opened {
        url,
        session: Box::new(CloudflaredSession {
            program,
            // Without a metrics server (an old cloudflared) only the process is watched.
            metrics: metrics_answered.then_some(base),
            http: http.clone(),
        }),
    })
}

#[derive(Deserialize)]
struct QuickTunnel {
    #[serde(default)]
    hostname: String,
}

/// `GET /quicktunnel`: the hostname once the quick tunnel exists.
async fn quick_tunnel_url(http: &reqwest::Client, base: &str) -> Option<String> {
    let answer = http.get(format!("{base}/quicktunnel")).send().await.ok()?;
    if !answer.status().is_success() {
        return None;
    }
    let q: QuickTunnel = answer.json().await.ok()?;
    let host = q.hostname.trim().trim_start_matches("https://").trim_end_matches('/');
    (!host.is_empty()).then(|| format!("https://{host}"))
}

/// `GET /ready`: `Some(true)` on 200, `Some(false)` on another answer, `None` when the metrics
/// server does not answer at all.
async fn is_ready(http: &reqwest::Client, base: &str) -> Option<bool> {
    let answer = http.get(format!("{base}/ready")).send().await.ok()?;
    Some(answer.status().is_success())
}

/// The stderr fallback: the `https://….trycloudflare.com` URL, "Registered tunnel connection",
/// and error lines (`ERR`, `FTL`, or a bare "failed …" at exit).
fn parse_line(line: &str, out: &mut Output) {
    if let Some(url) = find_quick_url(line) {
        out.url = Some(url);
    }
    if line.contains("Registered tunnel connection") || line.contains("Connection registered") {
        out.ready = true;
    }
    for level in [" ERR ", " FTL "] {
        if let Some(at) = line.find(level) {
            out.last_error = Some(line[at + level.len()..].trim().to_owned());
            return;
        }
    }
    let lower = line.trim_start().to_ascii_lowercase();
    if lower.starts_with("failed") || lower.starts_with("error") {
        out.last_error = Some(line.trim().to_owned());
    }
}

/// `https://[a-z0-9-]+.trycloudflare.com` in a line.
fn find_quick_url(line: &str) -> Option<String> {
    const SUFFIX: &str = ".trycloudflare.com";
    let mut from = 0;
    while let Some(pos) = line[from..].find("https://") {
        let start = from + pos + "https://".len();
        let label: String = line[start..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-').collect();
        if !label.is_empty() && line[start + label.len()..].starts_with(SUFFIX) && label != "api" {
            return Some(format!("https://{label}{SUFFIX}"));
        }
        from = start;
    }
    None
}

struct CloudflaredSession {
    program: Running,
    metrics: Option<String>,
    http: reqwest::Client,
}

#[async_trait]
impl Session for CloudflaredSession {
    async fn ended(&mut self) -> String {
        // `/ready` is the probe: a connection to Cloudflare (cloudflared reconnects by itself).
        let http = &self.http;
        let probe = self.metrics.as_deref().map(|metrics| {
            move || async move {
                match is_ready(http, metrics).await {
                    Some(true) => Ok(()),
                    Some(false) => Err("cloudflared reports no connection to Cloudflare (/ready)"),
                    None => Err("cloudflared stopped answering on its metrics server"),
                }
            }
        });
        self.program.ended(probe).await
    }

    async fn stop(mut self: Box<Self>) {
        self.program.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_fallback() {
        let mut out = Output::default();
        parse_line("2024-05-01T10:00:00Z INF Requesting new quick Tunnel on trycloudflare.com...", &mut out);
        assert_eq!(out.url, None);
        parse_line("2024-05-01T10:00:02Z INF |  https://seasonal-deck-organisms-sf.trycloudflare.com                 |", &mut out);
        assert_eq!(out.url.as_deref(), Some("https://seasonal-deck-organisms-sf.trycloudflare.com"));
        assert!(!out.ready);
        parse_line("2024-05-01T10:00:03Z INF Registered tunnel connection connIndex=0 protocol=quic", &mut out);
        assert!(out.ready);
        parse_line("2024-05-01T10:00:04Z ERR Failed to dial a quic connection error=\"timeout\"", &mut out);
        assert_eq!(out.last_error.as_deref(), Some("Failed to dial a quic connection error=\"timeout\""));
        assert_eq!(find_quick_url("see https://api.trycloudflare.com/tunnel"), None);
    }
}
