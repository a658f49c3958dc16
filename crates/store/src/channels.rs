//! The `channels` table: every notification target by name (contract §5). A row holds
//! what the dispatcher needs to decide (on or off, the outcomes it announces, its quiet hours,
//! when a backlog becomes a summary) and the kind's non-secret fields as JSON; secrets live in
//! the secret store. A device of a hub is a channel of kind `device` whose token's SHA-256 is
//! kept here (the token itself only ever in the device's own secret store).

use std::collections::BTreeMap;

use super::counters::ChannelTally;
use super::sql::{self, params, Db, OptionalExtension, Row};
use super::{counters, Tx};
use crate::closed_set::closed_set;

closed_set! {
    /// What a channel is.
    #[ts(export)]
    pub enum ChannelKind {
        /// This machine's native notifications.
        Desktop = "desktop",
        /// A desktop app connected to this hub (`nevermiss devices add NAME`).
        Device = "device",
        /// A signed JSON POST (Standard Webhooks) to the user's URL.
        Webhook = "webhook",
        /// An ntfy topic (phone and desktop push).
        Ntfy = "ntfy",
        /// A Slack incoming webhook.
        Slack = "slack",
        /// A Discord webhook.
        Discord = "discord",
        /// E-mail over SMTP.
        Email = "email",
    }
}

closed_set! {
    /// The outcomes a channel can announce.
    #[ts(export)]
    pub enum Announce {
        Succeeded = "succeeded",
        Failed = "failed",
        Canceled = "canceled",
        Stuck = "stuck",
        NeedsInput = "needs_input",
    }
}

/// One channel as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelRow {
    pub name: String,
    pub kind: ChannelKind,
    pub enabled: bool,
    pub outcomes: Vec<Announce>,
    /// More due notifications at once than this become one summary (0: never).
    pub summary_after: i64,
    pub quiet: Option<Quiet>,
    /// The kind's non-secret fields as stored (`url` of a webhook or ntfy topic, the SMTP
    /// server, ...); the engine reads them typed (`channels::config::ChannelConfig`).
    pub config: serde_json::Map<String, serde_json::Value>,
    pub last_error: Option<String>,
    pub last_error_at: Option<i64>,
    pub last_ok_at: Option<i64>,
    /// A device's last connection to the hub.
    pub last_seen_at: Option<i64>,
    /// Its outage, while its sends fail: how many attempts in a row failed, and when the next
    /// one is (every pending row of the channel waits for it).
    pub outage: Option<Outage>,
}

/// A channel's outage: `attempts` failed attempts in a row (the channel's, not one message's),
/// the next at `retry_at` (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub attempts: i64,
    pub retry_at: i64,
}

/// Quiet hours: from `from` to `to` (minutes after local midnight; across midnight when `to` is
/// earlier), notifications wait; urgent ones (a failed job, a stuck one) break through when
/// `urgent_breaks_through`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    pub from: i64,
    pub to: i64,
    pub urgent_breaks_through: bool,
}

impl Quiet {
    /// Whether `minute` (after local midnight) is inside the quiet hours.
    pub fn covers(&self, minute: i64) -> bool {
        if self.from <= self.to {
            self.from <= minute && minute < self.to
        } else {
            minute >= self.from || minute < self.to
        }
    }

    /// Whether a notification is held at `minute`: inside the quiet hours, and not an urgent one
    /// allowed to break through.
    pub fn holds(&self, minute: i64, urgent: bool) -> bool {
        self.covers(minute) && !(urgent && self.urgent_breaks_through)
    }

    /// Minutes from `minute` until the quiet hours end.
    pub fn minutes_left(&self, minute: i64) -> i64 {
        (self.to - minute).rem_euclid(24 * 60)
    }
}

impl ChannelRow {
    /// A new channel of `kind`, on, announcing every outcome, summarizing after 5.
    pub fn new(name: &str, kind: ChannelKind) -> ChannelRow {
        ChannelRow {
            name: name.to_owned(),
            kind,
            enabled: true,
            outcomes: Announce::ALL.to_vec(),
            summary_after: DEFAULT_SUMMARY_AFTER,
            quiet: None,
            config: serde_json::Map::new(),
            last_error: None,
            last_error_at: None,
            last_ok_at: None,
            last_seen_at: None,
            outage: None,
        }
    }

    /// Whether `due` notifications at once go as one summary.
    pub fn summarizes(&self, due: usize) -> bool {
        self.summary_after > 0 && due as i64 > self.summary_after
    }

    /// Whether its sends keep failing: the last attempt failed.
    pub fn failing(&self) -> bool {
        match (self.last_error_at, self.last_ok_at) {
            (Some(failed), Some(ok)) => failed > ok,
            (Some(_), None) => true,
            _ => false,
        }
    }
}

pub const DEFAULT_SUMMARY_AFTER: i64 = 5;

/// The channel that is this machine's desktop, made by the migration.
pub const DESKTOP: &str = "desktop";

/// The `outcomes` column: the names between commas, with a comma at each end, so that a
/// `LIKE '%,name,%'` finds one on both databases.
fn outcomes_column(outcomes: &[Announce]) -> String {
    let names: Vec<&str> = outcomes.iter().map(|o| o.as_str()).collect();
    format!(",{},", names.join(","))
}

const COLUMNS: &str = "name, kind, enabled, outcomes, summary_after, quiet_from, quiet_to, quiet_urgent, config, \
                       last_error, last_error_at, last_ok_at, last_seen_at, outage_attempts, retry_at";

fn from_row(row: &Row) -> sql::Result<ChannelRow> {
    let kind: String = row.get("kind")?;
    let outcomes: String = row.get("outcomes")?;
    let quiet_from: Option<i64> = row.get("quiet_from")?;
    let quiet_to: Option<i64> = row.get("quiet_to")?;
    let config: String = row.get("config")?;
    Ok(ChannelRow {
        name: row.get("name")?,
        kind: ChannelKind::parse(&kind).unwrap_or(ChannelKind::Webhook),
        enabled: row.get::<_, i64>("enabled")? != 0,
        outcomes: outcomes.split(',').filter_map(Announce::parse).collect(),
        summary_after: row.get("summary_after")?,
        quiet: match (quiet_from, quiet_to) {
            (Some(from), Some(to)) => Some(Quiet { from, to, urgent_breaks_through: row.get::<_, i64>("quiet_urgent")? != 0 }),
            _ => None,
        },
        config: serde_json::from_str(&config).unwrap_or_default(),
        last_error: row.get("last_error")?,
        last_error_at: row.get("last_error_at")?,
        last_ok_at: row.get("last_ok_at")?,
        last_seen_at: row.get("last_seen_at")?,
        outage: match (row.get::<_, i64>("outage_attempts")?, row.get::<_, Option<i64>>(14)?) {
            (attempts, Some(retry_at)) if attempts > 0 => Some(Outage { attempts, retry_at }),
            _ => None,
        },
    })
}

/// Every channel, by name.
pub fn all(conn: &dyn Db) -> sql::Result<Vec<ChannelRow>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM channels ORDER BY name"))?.query_map([], from_row)?.collect()
}

pub fn get(conn: &dyn Db, name: &str) -> sql::Result<Option<ChannelRow>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM channels WHERE name = $1"))?.query_row(params![name], from_row).optional()
}

/// Creates or changes a channel's settings (its errors, times seen and token are kept).
pub fn put(conn: &dyn Db, channel: &ChannelRow, now: i64) -> sql::Result<()> {
    let config = serde_json::Value::Object(channel.config.clone()).to_string();
    conn.prepare_cached(
        "INSERT INTO channels (name, kind, enabled, outcomes, summary_after, quiet_from, quiet_to, quiet_urgent, config, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, enabled = excluded.enabled, outcomes = excluded.outcomes,
             summary_after = excluded.summary_after, quiet_from = excluded.quiet_from, quiet_to = excluded.quiet_to,
             quiet_urgent = excluded.quiet_urgent, config = excluded.config",
    )?
    .execute(params![
        channel.name,
        channel.kind.as_str(),
        channel.enabled as i64,
        outcomes_column(&channel.outcomes),
        channel.summary_after,
        channel.quiet.map(|q| q.from),
        channel.quiet.map(|q| q.to),
        channel.quiet.is_none_or(|q| q.urgent_breaks_through) as i64,
        config,
        now
    ])?;
    Ok(())
}

/// Removes a channel with its pending rows (counted as dropped, then its tallies forgotten).
/// Returns how many pending rows were dropped, or None when there was no such channel.
pub fn delete(tx: &mut Tx<'_>, name: &str) -> sql::Result<Option<usize>> {
    let removed = tx.prepare_cached("DELETE FROM channels WHERE name = $1")?.execute(params![name])?;
    if removed == 0 {
        return Ok(None);
    }
    let dropped = tx.prepare_cached("DELETE FROM outbox WHERE channel = $1 AND delivered_at IS NULL")?.execute(params![name])?;
    counters::forget_channel(tx, name)?;
    Ok(Some(dropped))
}

/// A send to the channel failed: its last error, and when.
pub fn send_failed(tx: &mut Tx<'_>, name: &str, error: &str, now: i64) -> sql::Result<()> {
    tx.prepare_cached("UPDATE channels SET last_error = $2, last_error_at = $3 WHERE name = $1")?.execute(params![name, error, now])?;
    tx.count_channel(name, ChannelTally::Failed, 1);
    Ok(())
}

/// A send to the channel succeeded: its outage, if any, is over.
pub fn send_succeeded(conn: &dyn Db, name: &str, now: i64) -> sql::Result<()> {
    conn.prepare_cached("UPDATE channels SET last_ok_at = $2, outage_attempts = 0, retry_at = NULL WHERE name = $1")?
        .execute(params![name, now])?;
    Ok(())
}

/// The channel failed (not one message: the channel): its outage, `attempts` attempts in a row
/// so far, the next at `retry_at` (ms). Its pending rows are not claimed before then.
pub fn outage(conn: &dyn Db, name: &str, outage: Outage) -> sql::Result<()> {
    conn.prepare_cached("UPDATE channels SET outage_attempts = $2, retry_at = $3 WHERE name = $1")?.execute(params![
        name,
        outage.attempts,
        outage.retry_at
    ])?;
    Ok(())
}

/// The channel's outage is over without a success: it answered (and refused one message), or
/// its settings changed (a fixed URL is tried at once).
pub fn outage_over(conn: &dyn Db, name: &str) -> sql::Result<()> {
    conn.prepare_cached("UPDATE channels SET outage_attempts = 0, retry_at = NULL WHERE name = $1 AND outage_attempts > 0")?
        .execute(params![name])?;
    Ok(())
}

/// How many rows wait for delivery, per channel.
pub fn pending(conn: &dyn Db) -> sql::Result<BTreeMap<String, i64>> {
    conn.prepare_cached("SELECT channel, count(*) AS pending FROM outbox WHERE delivered_at IS NULL GROUP BY channel")?
        .query_map([], |r| Ok((r.get("channel")?, r.get("pending")?)))?
        .collect()
}

/// A device: makes its channel with the SHA-256 of its token. Fails (unique) when the name is
/// taken by any channel.
pub fn add_device(conn: &dyn Db, name: &str, token_sha256: &str, now: i64) -> sql::Result<()> {
    conn.prepare_cached("INSERT INTO channels (name, kind, outcomes, created_at, token_sha256) VALUES ($1, 'device', $2, $3, $4)")?
        .execute(params![name, outcomes_column(Announce::ALL), now, token_sha256])?;
    Ok(())
}

/// The device a token's SHA-256 belongs to.
pub fn device_of_token(conn: &dyn Db, token_sha256: &str) -> sql::Result<Option<String>> {
    conn.prepare_cached("SELECT name FROM channels WHERE kind = 'device' AND token_sha256 = $1")?
        .query_row(params![token_sha256], |r| r.get(0))
        .optional()
}

/// A device connected (or is still connected).
pub fn device_seen(conn: &dyn Db, name: &str, now: i64) -> sql::Result<()> {
    conn.prepare_cached("UPDATE channels SET last_seen_at = $2 WHERE name = $1 AND kind = 'device'")?.execute(params![name, now])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_hours_across_midnight_and_within_a_day() {
        let night = Quiet { from: 22 * 60, to: 7 * 60, urgent_breaks_through: true };
        assert!(night.covers(23 * 60));
        assert!(night.covers(0));
        assert!(night.covers(6 * 60 + 59));
        assert!(!night.covers(7 * 60));
        assert!(!night.covers(12 * 60));
        assert_eq!(night.minutes_left(23 * 60), 8 * 60);
        assert_eq!(night.minutes_left(6 * 60), 60);
        let lunch = Quiet { from: 12 * 60, to: 13 * 60, urgent_breaks_through: false };
        assert!(lunch.covers(12 * 60 + 30));
        assert!(!lunch.covers(13 * 60));
        assert!(!lunch.covers(11 * 60));
        assert_eq!(lunch.minutes_left(12 * 60 + 30), 30);
    }

    #[test]
    fn outcomes_are_stored_between_commas() {
        assert_eq!(outcomes_column(&[Announce::Failed, Announce::Stuck]), ",failed,stuck,");
        assert_eq!(outcomes_column(&[]), ",,");
    }
}
