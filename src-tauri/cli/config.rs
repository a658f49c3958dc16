//! `nevermiss settings` and `nevermiss secrets`: the running instance's configuration from the
//! command line, through the admin API (the same calls the Settings screen makes).

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};

use super::args::{SecretsCommand, SettingsCommand};
use super::client::{encode, Client};

pub(super) async fn settings(client: &Client, command: Option<SettingsCommand>, json: bool) -> anyhow::Result<()> {
    let (body, changed) = match command {
        None => (client.get("/api/settings").await?, None),
        Some(SettingsCommand::Set { key, value }) => {
            let request = client.http.put(format!("{}/api/settings", client.base)).json(&json!({ key.clone(): value }));
            let (status, body) = client.answer(request).await?;
            if status >= 400 {
                bail!("{key}: {}", field_error(&body, &key));
            }
            (body, Some(key))
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    // After a change, the lines it changed (a duration also as people write it).
    let shown = |line: &str| {
        changed.as_ref().is_none_or(|key| line == key || line == format!("durations.{key}") || line.ends_with(&format!(".{key}")))
    };
    for (key, value) in flattened(&body).into_iter().filter(|(key, _)| shown(key)) {
        println!("{key} = {value}");
    }
    Ok(())
}

/// A settings answer as `key = value` lines, nested objects as dotted keys, in the API's order.
fn flattened(value: &Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    let key = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                    walk(&key, value, out);
                }
            }
            Value::String(text) => out.push((prefix.to_owned(), text.clone())),
            Value::Null => out.push((prefix.to_owned(), "-".to_owned())),
            other => out.push((prefix.to_owned(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk("", value, &mut out);
    out
}

/// The reason a field was refused, as the API's error body says it.
fn field_error(body: &Value, key: &str) -> String {
    body.get("errors")
        .and_then(|errors| errors.get(key))
        .or_else(|| body.get("error"))
        .and_then(Value::as_str)
        .unwrap_or("refused, no reason given")
        .to_owned()
}

pub(super) async fn secrets(client: &Client, command: Option<SecretsCommand>, json: bool) -> anyhow::Result<()> {
    let (provider, name, value) = match command {
        None => return list_secrets(client, json).await,
        Some(SecretsCommand::Set { provider, name }) => {
            let value = read_secret(&format!("{provider} {name}"))?;
            (provider, name, value)
        }
        Some(SecretsCommand::Unset { provider, name }) => (provider, name, String::new()),
    };
    let field = match name.as_str() {
        "api-key" | "api_key" => Some("api_key"),
        "webhook-secret" | "webhook_secret" => Some("webhook_secret"),
        _ => None,
    };
    let body = match field {
        Some(field) => json!({ field: value }),
        None => json!({ "named": { name.clone(): value } }),
    };
    let request = client.http.put(format!("{}/api/secrets/{}", client.base, encode(&provider))).json(&body);
    let (status, answer) = client.answer(request).await?;
    if status >= 400 {
        bail!("{provider} {name}: {}", field_error(&answer, field.unwrap_or(&name)));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else if value.is_empty() {
        println!("{provider} {name}: forgotten");
    } else {
        println!("{provider} {name}: set");
    }
    if let Some(note) = answer.get("discovery_note").and_then(Value::as_str).filter(|_| !json) {
        eprintln!("{note}");
    }
    Ok(())
}

async fn list_secrets(client: &Client, json: bool) -> anyhow::Result<()> {
    let body = client.get("/api/secrets").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    let said = |status: &Value| match (status.get("set").and_then(Value::as_bool), status.get("source").and_then(Value::as_str)) {
        (Some(true), Some(source)) => format!("set ({source})"),
        (Some(true), None) => "set".to_owned(),
        _ => "not set".to_owned(),
    };
    let empty = Map::new();
    let providers = body.get("providers").and_then(Value::as_object).unwrap_or(&empty);
    let width = providers.keys().map(String::len).max().unwrap_or(0);
    for (name, secrets) in providers {
        let mut line =
            format!("{name:width$}  api key: {:<16}  webhook secret: {}", said(&secrets["api_key"]), said(&secrets["webhook_secret"]));
        if let Some(named) = secrets.get("named").and_then(Value::as_object) {
            for (secret, status) in named {
                line.push_str(&format!("  {secret}: {}", said(status)));
            }
        }
        println!("{line}");
    }
    if let Some(store) = body.get("store").and_then(Value::as_str) {
        let note = body.get("store_note").and_then(Value::as_str).map(|n| format!(" ({n})")).unwrap_or_default();
        println!("saved secrets go to: {store}{note}");
    }
    Ok(())
}

/// A secret's value from standard input: typed unseen on a terminal, else its first line.
pub(super) fn read_secret(what: &str) -> anyhow::Result<String> {
    let value = if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        rpassword::prompt_password(format!("{what} (not shown): ")).context("cannot read the secret from the terminal")?
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).context("cannot read the secret from standard input")?;
        line
    };
    let value = value.trim_end_matches(['\r', '\n']).to_owned();
    if value.is_empty() {
        bail!("no secret given on standard input for {what} (to forget one: `nevermiss secrets unset`)");
    }
    Ok(value)
}
