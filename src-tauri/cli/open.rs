//! `nevermiss url` and `nevermiss open`: where webhooks go, and the web UI in the browser.

use anyhow::{anyhow, Context};
use serde_json::Value;

use super::args::Options;
use super::client::Client;

/// Where webhooks go, as `url` prints it.
#[derive(serde::Serialize)]
struct WebhookBase {
    /// The public URL (the tunnel's or the configured one), else the local receiver's.
    url: String,
    public: bool,
    /// Why there is no public URL: none configured, or the tunnel is starting or down.
    why_local: Option<String>,
    /// The tunnel's public URL changed since the provider's webhooks were last pointed at it.
    url_changed: bool,
}

pub(super) async fn url(client: &Client, json: bool) -> anyhow::Result<()> {
    let info = client.get("/api/info").await?;
    let public = info.get("public_url").and_then(Value::as_str);
    let base = public
        .or_else(|| info.get("receiver_url").and_then(Value::as_str))
        .ok_or_else(|| anyhow!("the instance did not say its receiver URL"))?
        .to_owned();
    let tunnel = client.get("/api/tunnel").await.unwrap_or(Value::Null);
    let said = |key: &str| tunnel.get(key).and_then(Value::as_str);
    let why_local = public.is_none().then(|| {
        let kind = said("kind").unwrap_or("none");
        match said("status").unwrap_or("off") {
            "down" => format!("the {kind} tunnel is down: {}", said("last_error").unwrap_or("no reason given")),
            "starting" => format!("the {kind} tunnel is starting"),
            _ => "no tunnel runs (NEVERMISS_TUNNEL)".to_owned(),
        }
    });
    let url_changed = public.is_some() && tunnel.get("url_changed").and_then(Value::as_bool).unwrap_or(false);
    let answer = WebhookBase { url: base, public: public.is_some(), why_local, url_changed };
    if json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    let base = &answer.url;
    println!("{base}");
    if let Some(why) = &answer.why_local {
        eprintln!("(local only: {why}; providers on the internet cannot reach it) webhooks go to {base}/hooks/<provider>");
    } else if answer.url_changed {
        eprintln!("(the public URL changed: update the webhook URL at the provider to {base}/hooks/<provider>)");
    }
    Ok(())
}

/// Opens the UI with a one-time code (valid 60 s, once), never the token, and never the code on
/// a command line either: a browser's command line is visible to every user of the machine
/// (`/proc/*/cmdline`, `ps`), who could redeem the code first. The browser is started on a page
/// in the data dir that only the user can read (`OPEN_PAGE`, 0600), which sends it on to the code
/// URL, as Jupyter hands its token over.
pub(super) async fn open_ui(client: &Client, options: &Options) -> anyhow::Result<()> {
    let (_, body) = client.send(client.http.post(format!("{}/api/ui-codes", client.base))).await?;
    let code = body.get("code").and_then(Value::as_str).ok_or_else(|| anyhow!("the instance answered no code for the UI"))?;
    let url = format!("{}/#code={code}", client.base);
    println!("{url}");
    let page = options.data_dir()?.join(nevermiss_engine::data_dir::OPEN_PAGE);
    nevermiss_engine::secrets::write_private(&page, redirect_page(&url).as_bytes())
        .with_context(|| format!("cannot write {}", page.display()))?;
    if let Err(e) = open::that_detached(&page) {
        eprintln!("(could not open a browser: {e}; open the URL above)");
    }
    Ok(())
}

/// A page that sends the browser on to `url` at once (`url` is the API's own, with a hex code: no
/// character of it needs escaping in HTML or in a script's string).
fn redirect_page(url: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <title>NeverMiss</title></head>\n<body><p>Opening <a href=\"{url}\">NeverMiss</a>...</p>\
         <script>location.replace(\"{url}\")</script></body></html>\n"
    )
}
