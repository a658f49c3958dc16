//! `nevermiss channels`: where notifications go besides the desktop, through the admin API.

use anyhow::bail;
use serde_json::{json, Map, Value};

use super::args::{ChannelAdd, ChannelsCommand};
use super::client::{encode, Client};
use super::config::read_secret;

pub(super) async fn channels(client: &Client, command: Option<ChannelsCommand>, json: bool) -> anyhow::Result<()> {
    let body = match command {
        None => client.get("/api/channels").await?,
        Some(ChannelsCommand::Add(add)) => {
            let name = add.name.clone();
            let (status, body) = client.answer(client.http.put(channel_url(client, &name)).json(&channel_input(add)?)).await?;
            if status >= 400 {
                bail!("channel {name}: {}", refusal(&body));
            }
            body
        }
        Some(ChannelsCommand::Test { name }) => {
            let (_, body) = client.send(client.http.post(format!("{}/test", channel_url(client, &name)))).await?;
            if !json {
                let ok = body.get("ok").and_then(Value::as_bool).unwrap_or(false);
                let answer = body.get("answer").and_then(Value::as_str).unwrap_or("");
                println!("{name}: {} ({answer})", if ok { "delivered" } else { "not delivered" });
                return if ok { Ok(()) } else { bail!("the test through {name} failed: {answer}") };
            }
            body
        }
        Some(ChannelsCommand::Remove { name }) => client.send(client.http.delete(channel_url(client, &name))).await?.1,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    if let Some(list) = body.get("channels").and_then(Value::as_array) {
        for channel in list {
            println!("{}", one_line(channel));
        }
    } else if let Some(removed) = body.get("removed").and_then(Value::as_str) {
        println!("removed {removed} ({} pending notifications dropped)", body.get("dropped").and_then(Value::as_i64).unwrap_or(0));
    } else {
        println!("{}", one_line(&body));
    }
    Ok(())
}

fn channel_url(client: &Client, name: &str) -> String {
    format!("{}/api/channels/{}", client.base, encode(name))
}

/// A channel in one line: its name, kind, where it goes, what it announces and how it fares.
fn one_line(channel: &Value) -> String {
    let text = |key: &str| channel.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let number = |key: &str| channel.get(key).and_then(Value::as_i64).unwrap_or(0);
    let outcomes: Vec<&str> =
        channel.get("outcomes").and_then(Value::as_array).map(|o| o.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let to = [text("url"), text("to"), text("host")].into_iter().find(|s| !s.is_empty()).unwrap_or_else(|| "-".into());
    let enabled = channel.get("enabled").and_then(Value::as_bool).unwrap_or(true);
    let mut line = format!(
        "{:<12} {:<8} {:<3} {to}  announces {}  delivered {} failed {} pending {}",
        text("name"),
        text("kind"),
        if enabled { "on" } else { "off" },
        if outcomes.is_empty() { "-".to_owned() } else { outcomes.join(",") },
        number("delivered"),
        number("failed"),
        number("pending")
    );
    if channel.get("failing").and_then(Value::as_bool).unwrap_or(false) {
        line.push_str(&format!("  FAILING: {}", text("last_error")));
    }
    line
}

/// The API's body for `channels add`, its secret read from standard input when asked.
fn channel_input(add: ChannelAdd) -> anyhow::Result<Value> {
    let mut body = Map::new();
    body.insert("kind".into(), json!(add.kind));
    for (key, value) in
        [("url", add.url), ("host", add.host), ("tls", add.tls), ("username", add.username), ("from", add.from), ("to", add.to)]
    {
        if let Some(value) = value {
            body.insert(key.into(), json!(value));
        }
    }
    if let Some(port) = add.port {
        body.insert("port".into(), json!(port));
    }
    if !add.outcomes.is_empty() {
        body.insert("outcomes".into(), json!(add.outcomes));
    }
    if add.secret_stdin {
        // Where each kind keeps its secret (Slack's and Discord's is their URL itself).
        let field = match add.kind.as_str() {
            "webhook" => "secret",
            "ntfy" => "token",
            "email" => "password",
            "slack" | "discord" => "url",
            other => bail!("a {other} channel takes no secret"),
        };
        body.insert(field.into(), json!(read_secret(&format!("channel {} {field}", add.name))?));
    }
    Ok(Value::Object(body))
}

/// Why the API refused a channel: its message and each field's reason.
fn refusal(body: &Value) -> String {
    let mut text = body.get("error").and_then(Value::as_str).unwrap_or("refused, no reason given").to_owned();
    if let Some(errors) = body.get("errors").and_then(Value::as_object) {
        for (field, why) in errors {
            text.push_str(&format!("; {field}: {}", why.as_str().unwrap_or("")));
        }
    }
    text
}
