//! ngrok through its agent, run as a child process:
//! `ngrok http http://127.0.0.1:PORT --log stderr --log-format logfmt --config FILE [--domain D]`,
//! with the auth token in `NGROK_AUTHTOKEN` (never on the command line) and the agent's local API
//! moved to a free loopback port by a config file of ours, so it never collides with another
//! agent on 4040. The URL is read from `GET /api/tunnels` (`public_url` of the tunnel that points
//! at our port); the `url=` of its "started tunnel" log line is the fallback. While it runs, the
//! tunnel must stay listed there.
//!
//! Why the agent and not the `ngrok` crate: the agent is a process we can stand in for in tests
//! (nothing offline speaks ngrok's session protocol), it shares cloudflared's supervision, it
//! keeps a large TLS/QUIC dependency tree out of the build, and a user's existing ngrok setup
//! (its config file with the token) keeps working.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::time::Instant;

use crate::data_dir::NGROK_CONFIG_FILE;

use super::child_process::{free_loopback_port, ChildProcess, Output, Running};
use super::config::TunnelConfig;
use super::session::{Opened, Session, TunnelError};

const START_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(250);
const INSTALL_HINT: &str = "install the ngrok agent, or set NEVERMISS_NGROK_PATH (setting tunnel.ngrok_path) to where it is";

/// The agent's own config file, where `ngrok config add-authtoken` keeps the token.
fn default_agent_config() -> Option<PathBuf> {
    let dirs = directories::BaseDirs::new()?;
    let found = [dirs.config_dir(), dirs.config_local_dir()].into_iter().map(|d| d.join("ngrok").join("ngrok.yml")).find(|p| p.is_file());
    found
}

pub async fn open(cfg: &TunnelConfig, local: SocketAddr, work_dir: &Path, http: &reqwest::Client) -> Result<Opened, TunnelError> {
    let agent_config = default_agent_config();
    if cfg.ngrok_authtoken.is_none() && agent_config.is_none() {
        return Err(TunnelError::Setup(
            "no ngrok auth token: set NEVERMISS_NGROK_AUTHTOKEN (or NGROK_AUTHTOKEN) or store it with PUT /api/tunnel/credentials".into(),
        ));
    }
    let api_port = free_loopback_port()?;
    let own_config = work_dir.join(NGROK_CONFIG_FILE);
    // In the data dir, owner-only like everything there (`crate::data_dir`).
    crate::secrets::write_private(&own_config, format!("version: \"2\"\nweb_addr: 127.0.0.1:{api_port}\n").as_bytes())
        .map_err(|e| TunnelError::Failed(format!("cannot write {}: {e}", own_config.display())))?;

    let local_port = local.port();
    let local = format!("http://{local}");
    let mut args: Vec<String> = vec!["http".into(), local, "--log".into(), "stderr".into(), "--log-format".into(), "logfmt".into()];
    // Later files win: ours (the API address) after the user's (the token).
    for file in agent_config.iter().chain(std::iter::once(&own_config)) {
        args.push("--config".into());
        args.push(file.display().to_string());
    }
    if let Some(domain) = &cfg.ngrok_domain {
        args.push("--domain".into());
        args.push(domain.clone());
    }
    let envs: Vec<(&str, &str)> = cfg.ngrok_authtoken.iter().map(|t| ("NGROK_AUTHTOKEN", t.as_str())).collect();
    let child = ChildProcess::spawn("ngrok", &cfg.ngrok_path, &args, &envs, &[], parse_line, INSTALL_HINT)?;

    let api = format!("http://127.0.0.1:{api_port}");
    let output = child.output.clone();
    let discover = async {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(url) = tunnel_url(http, &api, local_port).await.or_else(|| output.lock().unwrap().url.clone()) {
                return Ok(url);
            }
            if Instant::now() >= deadline {
                return Err(output.lock().unwrap().gave_up("ngrok gave no tunnel", START_TIMEOUT));
            }
            tokio::time::sleep(POLL).await;
        }
    };
    let (program, url) = Running::start(child, discover).await?;
    tracing::info!(%url, pid = ?program.id(), "ngrok tunnel is up");
    Ok(Opened { url, session: Box::new(NgrokSession { program, api, local_port, http: http.clone() }) })
}

#[derive(Deserialize)]
struct Tunnels {
    #[serde(default)]
    tunnels: Vec<TunnelEntry>,
}

#[derive(Deserialize)]
struct TunnelEntry {
    #[serde(default)]
    public_url: String,
    #[serde(default)]
    proto: String,
    #[serde(default)]
    config: Option<TunnelEntryConfig>,
}

#[derive(Deserialize)]
struct TunnelEntryConfig {
    #[serde(default)]
    addr: String,
}

/// `GET /api/tunnels`: the public URL of the tunnel that forwards to our port (https first).
async fn tunnel_url(http: &reqwest::Client, api: &str, local_port: u16) -> Option<String> {
    let answer = http.get(format!("{api}/api/tunnels")).send().await.ok()?;
    if !answer.status().is_success() {
        return None;
    }
    let list: Tunnels = answer.json().await.ok()?;
    let ours = |t: &&TunnelEntry| {
        let addr = t.config.as_ref().map(|c| c.addr.as_str()).unwrap_or("");
        addr.trim_end_matches('/').ends_with(&format!(":{local_port}")) && !t.public_url.is_empty()
    };
    let mut candidates: Vec<&TunnelEntry> = list.tunnels.iter().filter(ours).collect();
    candidates.sort_by_key(|t| t.proto != "https" && !t.public_url.starts_with("https://"));
    candidates.first().map(|t| t.public_url.trim_end_matches('/').to_owned())
}

/// Error lines (logfmt `lvl=eror`/`lvl=crit`, or the `ERROR:` block printed at exit, without the
/// line that echoes the token) and the `url=` of "started tunnel".
fn parse_line(line: &str, out: &mut Output) {
    let trimmed = line.trim();
    if let Some(rest) = trimmed.strip_prefix("ERROR:") {
        let rest = rest.trim();
        if rest.is_empty() || rest.to_ascii_lowercase().contains("authtoken:") || rest.starts_with("http") {
            return;
        }
        let continues = out.lines.back().is_some_and(|l| l.trim_start().starts_with("ERROR:"));
        if continues {
            if rest.starts_with("ERR_NGROK_") {
                if let Some(e) = out.last_error.as_mut() {
                    if !e.contains("ERR_NGROK_") {
                        e.push_str(&format!(" ({rest})"));
                    }
                }
            }
            return;
        }
        out.last_error = Some(rest.to_owned());
        return;
    }
    let level = logfmt_value(trimmed, "lvl");
    if matches!(level.as_deref(), Some("eror" | "crit" | "error")) {
        let msg = logfmt_value(trimmed, "msg").unwrap_or_default();
        out.last_error = Some(match logfmt_value(trimmed, "err") {
            Some(err) if !msg.is_empty() => format!("{msg}: {err}"),
            Some(err) => err,
            None => msg,
        });
    }
    if logfmt_value(trimmed, "msg").as_deref() == Some("started tunnel") {
        if let Some(url) = logfmt_value(trimmed, "url") {
            if url.starts_with("https://") || out.url.is_none() {
                out.url = Some(url);
            }
        }
    }
}

/// The value of `key=` in a logfmt line (quoted or bare).
fn logfmt_value(line: &str, key: &str) -> Option<String> {
    let pattern = format!("{key}=");
    let mut search = 0;
    while let Some(pos) = line[search..].find(&pattern) {
        let at = search + pos;
        let at_word_start = at == 0 || line.as_bytes()[at - 1] == b' ';
        let rest = &line[at + pattern.len()..];
        if at_word_start {
            if let Some(quoted) = rest.strip_prefix('"') {
                let mut value = String::new();
                let mut chars = quoted.chars();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => value.extend(chars.next()),
                        '"' => break,
                        c => value.push(c),
                    }
                }
                return Some(value);
            }
            return Some(rest.split(' ').next().unwrap_or("").to_owned());
        }
        search = at + pattern.len();
    }
    None
}

struct NgrokSession {
    program: Running,
    api: String,
    local_port: u16,
    http: reqwest::Client,
}

#[async_trait]
impl Session for NgrokSession {
    async fn ended(&mut self) -> String {
        // The probe: the agent's local API still lists the tunnel.
        let (http, api, local_port) = (&self.http, self.api.as_str(), self.local_port);
        let probe = move || async move {
            let listed = tunnel_url(http, api, local_port).await;
            listed.map(|_| ()).ok_or("ngrok no longer lists the tunnel on its local API")
        };
        self.program.ended(Some(probe)).await
    }

    async fn stop(mut self: Box<Self>) {
        self.program.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines() {
        let mut out = Output::default();
        parse_line(
            r#"t=2024-05-01T10:00:00+0000 lvl=info msg="started tunnel" obj=tunnels name=command_line addr=http://127.0.0.1:8787 url=https://abcd-1-2.ngrok-free.app"#,
            &mut out,
        );
        assert_eq!(out.url.as_deref(), Some("https://abcd-1-2.ngrok-free.app"));
        parse_line(
            r#"t=2024-05-01T10:00:01+0000 lvl=eror msg="session closing" obj=tunnels.session err="authentication failed: bad token""#,
            &mut out,
        );
        assert_eq!(out.last_error.as_deref(), Some("session closing: authentication failed: bad token"));

        let mut out = Output::default();
        for line in [
            "ERROR:  authentication failed: The authtoken you specified does not look like a proper ngrok tunnel authtoken.",
            "ERROR:  Your authtoken: not-a-token",
            "ERROR:  ERR_NGROK_105",
            "ERROR:  https://ngrok.com/docs/errors/err_ngrok_105",
        ] {
            parse_line(line, &mut out);
            out.lines.push_back(line.to_owned());
        }
        let e = out.last_error.unwrap();
        assert!(e.starts_with("authentication failed") && e.ends_with("(ERR_NGROK_105)"), "{e}");
        assert!(!e.contains("not-a-token"));
    }
}
