//! `nevermiss devices`: a hub's devices.

use anyhow::anyhow;
use serde_json::Value;

use super::args::DevicesCommand;
use super::client::Client;

/// `nevermiss devices ...`, through the running hub's admin API.
pub(super) async fn devices(client: &Client, command: DevicesCommand) -> anyhow::Result<()> {
    match command {
        DevicesCommand::Add { name } => {
            let (_, body) =
                client.send(client.http.post(format!("{}/api/devices", client.base)).json(&serde_json::json!({ "name": name }))).await?;
            let token = body.get("token").and_then(Value::as_str).ok_or_else(|| anyhow!("the hub answered no token"))?;
            println!("{token}");
            eprintln!("Device {name:?} added. Paste this token in that machine's NeverMiss: Settings, Hub (it is not shown again).");
        }
        DevicesCommand::List { json } => {
            let (_, body) = client.send(client.http.get(format!("{}/api/devices", client.base))).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&body)?);
                return Ok(());
            }
            let devices = body.get("devices").and_then(Value::as_array).cloned().unwrap_or_default();
            if devices.is_empty() {
                println!("no devices (add one with `nevermiss devices add NAME`)");
            }
            for d in devices {
                let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
                let number = |k: &str| d.get(k).and_then(Value::as_i64).unwrap_or(0);
                println!(
                    "{:<20} {:<8} last seen {:<25} pending {:<5} delivered {}",
                    text("name"),
                    if d.get("enabled").and_then(Value::as_bool).unwrap_or(false) { "on" } else { "off" },
                    text("last_seen_at"),
                    number("pending"),
                    number("delivered")
                );
            }
        }
        DevicesCommand::Revoke { name } => {
            let (_, body) = client.send(client.http.delete(format!("{}/api/devices/{name}", client.base))).await?;
            let dropped = body.get("dropped").and_then(Value::as_i64).unwrap_or(0);
            println!("revoked {name} ({dropped} pending notifications dropped)");
        }
    }
    Ok(())
}
