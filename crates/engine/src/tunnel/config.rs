//! Which tunnel runs, and with what: a variable beats the stored setting (contract §1);
//! tokens and secrets come from their variable, else the secret store, never from the database.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::providers::SecretKind;
use crate::secrets::Secrets;
use crate::settings::Settings;

/// Stored setting (and `NEVERMISS_TUNNEL`): the kind.
pub const KIND: &str = "tunnel";
pub const CLOUDFLARED_PATH: &str = "tunnel.cloudflared_path";
pub const CLOUDFLARED_HOSTNAME: &str = "tunnel.cloudflared_hostname";
pub const NGROK_PATH: &str = "tunnel.ngrok_path";
pub const NGROK_DOMAIN: &str = "tunnel.ngrok_domain";
pub const BORE_SERVER: &str = "tunnel.bore_server";
pub const PUBLIC_URL: &str = "tunnel.public_url";
/// `on` (default) or `off`: the automatic self-tests (after every start, and when quiet).
pub const SELF_TEST: &str = "tunnel.self_test";
/// How long without a delivery or a self-test before a self-test is sent (default 15 minutes).
pub const SELF_TEST_QUIET_SECS: &str = "tunnel.self_test_quiet_secs";
pub const DEFAULT_QUIET_SECS: u64 = 15 * 60;
/// The URL of the last start, kept across runs to flag a change (not a user setting).
pub const LAST_URL: &str = "tunnel.last_url";

/// The tunnel secrets: their name in `PUT /api/tunnel/credentials`, the variables that beat the
/// secret store, and where the store keeps them (as the "API key" of the tunnel service, so the
/// keychain holds them like any other key).
pub struct TunnelSecret {
    pub name: &'static str,
    pub vars: &'static [&'static str],
    pub service: &'static str,
}

pub const CLOUDFLARED_TOKEN: TunnelSecret =
    TunnelSecret { name: "cloudflared_token", vars: &["NEVERMISS_CLOUDFLARED_TOKEN"], service: "cloudflared" };
pub const NGROK_AUTHTOKEN: TunnelSecret =
    TunnelSecret { name: "ngrok_authtoken", vars: &["NEVERMISS_NGROK_AUTHTOKEN", "NGROK_AUTHTOKEN"], service: "ngrok" };
pub const BORE_SECRET: TunnelSecret = TunnelSecret { name: "bore_secret", vars: &["NEVERMISS_BORE_SECRET"], service: "bore" };
pub const SECRETS: [TunnelSecret; 3] = [CLOUDFLARED_TOKEN, NGROK_AUTHTOKEN, BORE_SECRET];

impl TunnelSecret {
    /// The secret in force: a variable, else the secret store.
    pub fn get(&self, secrets: &Secrets) -> Option<String> {
        self.vars.iter().find_map(|v| var(v)).or_else(|| secrets.get(self.service, SecretKind::ApiKey).filter(|v| !v.is_empty()))
    }

    /// Where it comes from (`env` or `store`), never its value.
    pub fn source(&self, secrets: &Secrets) -> Option<&'static str> {
        if self.vars.iter().any(|v| var(v).is_some()) {
            return Some("env");
        }
        secrets.get(self.service, SecretKind::ApiKey).filter(|v| !v.is_empty()).map(|_| "store")
    }

    pub fn set(&self, secrets: &Secrets, value: Option<&str>) -> Result<(), crate::secrets::SecretError> {
        secrets.set(self.service, SecretKind::ApiKey, value)
    }
}

crate::closed_set::closed_set! {
    /// Which tunnel makes the receiver reachable from the internet.
    #[derive(Default)]
    #[ts(export)]
    pub enum TunnelKind {
        #[default]
        None = "none",
        Cloudflared = "cloudflared",
        Ngrok = "ngrok",
        Bore = "bore",
        Manual = "manual",
    }
}

impl TunnelKind {
    /// The kind a setting or variable names: any case, and empty or `off` for none.
    pub fn from_setting(s: &str) -> Option<TunnelKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "off" => Some(TunnelKind::None),
            other => TunnelKind::parse(other),
        }
    }
}

/// Everything a start needs, resolved once per start.
#[derive(Clone)]
pub struct TunnelConfig {
    pub kind: TunnelKind,
    /// Set when the kind named by the variable or the setting is not one we know.
    pub kind_error: Option<String>,
    pub cloudflared_path: PathBuf,
    /// A named tunnel: its token (passed in `TUNNEL_TOKEN`) and the user's hostname.
    pub cloudflared_token: Option<String>,
    pub cloudflared_hostname: Option<String>,
    pub ngrok_path: PathBuf,
    pub ngrok_authtoken: Option<String>,
    pub ngrok_domain: Option<String>,
    /// `host` or `host:port` (the port asked for on the server; any when absent).
    pub bore_server: Option<String>,
    pub bore_secret: Option<String>,
    pub public_url: Option<String>,
    pub self_test: bool,
    pub quiet: Duration,
}

impl std::fmt::Debug for TunnelConfig {
    // Secrets are never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelConfig")
            .field("kind", &self.kind)
            .field("cloudflared_path", &self.cloudflared_path)
            .field("cloudflared_token", &self.cloudflared_token.as_ref().map(|_| "***"))
            .field("cloudflared_hostname", &self.cloudflared_hostname)
            .field("ngrok_path", &self.ngrok_path)
            .field("ngrok_authtoken", &self.ngrok_authtoken.as_ref().map(|_| "***"))
            .field("ngrok_domain", &self.ngrok_domain)
            .field("bore_server", &self.bore_server)
            .field("bore_secret", &self.bore_secret.as_ref().map(|_| "***"))
            .field("public_url", &self.public_url)
            .finish()
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

impl TunnelConfig {
    pub fn resolve(settings: &Settings, secrets: &Secrets) -> TunnelConfig {
        let setting = |key: &str| settings.get(key).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        // The variable beats the setting.
        let chosen = |variable: &str, key: &str| var(variable).or_else(|| setting(key));
        let kind_text = chosen("NEVERMISS_TUNNEL", KIND).unwrap_or_default();
        let (kind, kind_error) = match TunnelKind::from_setting(&kind_text) {
            Some(kind) => (kind, None),
            None => {
                (TunnelKind::None, Some(format!("unknown tunnel kind {kind_text:?} (expected none, cloudflared, ngrok, bore or manual)")))
            }
        };
        TunnelConfig {
            kind,
            kind_error,
            cloudflared_path: chosen("NEVERMISS_CLOUDFLARED_PATH", CLOUDFLARED_PATH).unwrap_or_else(|| "cloudflared".into()).into(),
            cloudflared_token: CLOUDFLARED_TOKEN.get(secrets),
            cloudflared_hostname: chosen("NEVERMISS_CLOUDFLARED_HOSTNAME", CLOUDFLARED_HOSTNAME),
            ngrok_path: chosen("NEVERMISS_NGROK_PATH", NGROK_PATH).unwrap_or_else(|| "ngrok".into()).into(),
            ngrok_authtoken: NGROK_AUTHTOKEN.get(secrets),
            ngrok_domain: chosen("NEVERMISS_NGROK_DOMAIN", NGROK_DOMAIN),
            bore_server: chosen("NEVERMISS_BORE_SERVER", BORE_SERVER),
            bore_secret: BORE_SECRET.get(secrets),
            public_url: chosen("NEVERMISS_PUBLIC_URL", PUBLIC_URL),
            self_test: setting(SELF_TEST).is_none_or(|v| v != "off"),
            quiet: Duration::from_secs(setting(SELF_TEST_QUIET_SECS).and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_QUIET_SECS)),
        }
    }
}

/// Checks a tunnel setting for `PUT /api/settings`: `None` when `key` is not a tunnel setting,
/// else the value to store or why it is refused.
pub fn validate_setting(key: &str, value: &Value) -> Option<Result<String, String>> {
    let text = || value.as_str().map(|s| s.trim().to_owned()).unwrap_or_default();
    Some(match key {
        KIND => {
            let t = text();
            match TunnelKind::from_setting(&t) {
                Some(kind) => Ok(kind.as_str().to_owned()),
                None => Err("must be none, cloudflared, ngrok, bore or manual".into()),
            }
        }
        CLOUDFLARED_PATH | NGROK_PATH => Ok(text()),
        CLOUDFLARED_HOSTNAME | NGROK_DOMAIN => {
            let t = text();
            let t = t.trim_start_matches("https://").trim_end_matches('/').to_owned();
            if t.contains('/') || t.contains(' ') {
                Err("must be a host name, like hooks.example.com".into())
            } else {
                Ok(t)
            }
        }
        BORE_SERVER => {
            let t = text();
            match parse_bore_server(&t) {
                _ if t.is_empty() => Ok(t),
                Ok(_) => Ok(t),
                Err(e) => Err(e),
            }
        }
        PUBLIC_URL => {
            let t = text();
            if t.is_empty() {
                Ok(t)
            } else {
                check_public_url(&t).map(|u| u.to_owned())
            }
        }
        SELF_TEST => match text().as_str() {
            "on" | "true" => Ok("on".into()),
            "off" | "false" => Ok("off".into()),
            _ => match value.as_bool() {
                Some(b) => Ok(if b { "on" } else { "off" }.into()),
                None => Err("must be on or off".into()),
            },
        },
        SELF_TEST_QUIET_SECS => crate::duration_text::check(value, 60, 7 * 86_400).map(|secs| secs.to_string()),
        _ if key.starts_with("tunnel.") => Err("unknown setting".into()),
        _ => return None,
    })
}

/// `host` or `host:port` into the host and the port asked for (0: any).
pub fn parse_bore_server(s: &str) -> Result<(String, u16), String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("no bore server (NEVERMISS_BORE_SERVER or the setting tunnel.bore_server)".into());
    }
    if s.contains("://") || s.contains('/') {
        return Err(format!("bore server {s:?} must be host or host:port, without a scheme"));
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.starts_with('[') => {
            let port: u16 = port.parse().map_err(|_| format!("bore server {s:?}: {port:?} is not a port number"))?;
            Ok((host.trim_matches(|c| c == '[' || c == ']').to_owned(), port))
        }
        _ => Ok((s.to_owned(), 0)),
    }
}

/// An http(s) URL with a host, without its trailing slash.
pub fn check_public_url(url: &str) -> Result<&str, String> {
    let url = url.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("public URL {url:?} must start with https:// (or http://)"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("public URL {url:?} has no host"));
    }
    if rest.contains("/hooks") {
        return Err(format!("public URL {url:?} must be the base URL, without /hooks/..."));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds() {
        assert_eq!(TunnelKind::from_setting("Bore"), Some(TunnelKind::Bore));
        assert_eq!(TunnelKind::from_setting(""), Some(TunnelKind::None));
        assert_eq!(TunnelKind::from_setting("frp"), None);
    }

    #[test]
    fn bore_servers() {
        assert_eq!(parse_bore_server("bore.pub").unwrap(), ("bore.pub".into(), 0));
        assert_eq!(parse_bore_server("127.0.0.1:4000").unwrap(), ("127.0.0.1".into(), 4000));
        assert!(parse_bore_server("http://bore.pub").is_err());
        assert!(parse_bore_server("host:notaport").is_err());
        assert!(parse_bore_server("").is_err());
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(validate_setting("tunnel", &json!("Bore")), Some(Ok("bore".into())));
        assert!(validate_setting("tunnel", &json!("frp")).unwrap().is_err());
        assert!(validate_setting("tunnel.public_url", &json!("ftp://x")).unwrap().is_err());
        assert_eq!(
            validate_setting("tunnel.public_url", &json!("https://hooks.example.com/")),
            Some(Ok("https://hooks.example.com".into()))
        );
        assert_eq!(validate_setting("tunnel.self_test", &json!(false)), Some(Ok("off".into())));
        assert!(validate_setting("tunnel.nope", &json!(1)).unwrap().is_err());
        assert_eq!(validate_setting("poll_interval_secs", &json!(5)), None);
    }
}
