//! The `counters` and `counter_hours` tables: what happened since the data dir was created, in
//! all and per UTC hour. Counters only grow. A write adds to them explicitly through its `Tx`
//! (`tx.count(Counter::Applied, 1)`); the writer sums a group's additions and writes them here
//! once, just before the group's COMMIT.

use std::collections::BTreeMap;

use super::sql::{self, params, Db};

use crate::closed_set::closed_set;
use crate::job::Outcome;

closed_set! {
    /// Every counter the store keeps (the names are the metrics' names, contract §3).
    pub enum Counter {
        /// Every request to a known provider's hook that got as far as its signature.
        DeliveriesTotal = "deliveries_total",
        Applied = "applied",
        Duplicates = "duplicates",
        Stale = "stale",
        BadSignatures = "bad_signatures",
        Rejected = "rejected",
        /// Verified events of a kind NeverMiss does not act on (answered 200 `ignored`).
        Ignored = "ignored",
        ReconcilePasses = "reconcile_passes",
        ReconcileRescues = "reconcile_rescues",
        ReconcileErrors = "reconcile_errors",
        StuckAlerts = "stuck_alerts",
        /// "Slower than usual" alerts (a job running much longer than its kind usually takes).
        SlowAlerts = "slow_alerts",
        NotificationsEnqueued = "notifications_enqueued",
        NotificationsDelivered = "notifications_delivered",
        /// Deliveries for a provider with no webhook secret configured (answered 503 so they retry).
        UnconfiguredDeliveries = "unconfigured_deliveries",
        /// Jobs first learned by listing a provider's jobs.
        JobsDiscovered = "jobs_discovered",
        /// Terminal states first learned by polling where no webhook was expected (a provider or
        /// kind of job without webhooks, or no webhook secret): not rescues.
        PollOnlyCompletions = "poll_only_completions",
        /// Cancel requests sent to a provider (accepted or refused).
        CancelRequests = "cancel_requests",
    }
}

closed_set! {
    /// A channel's own tallies (contract §5: enqueued, delivered, failed).
    #[ts(export)]
    pub enum ChannelTally {
        /// Rows enqueued for it (one per finished job it announces).
        Enqueued = "enqueued",
        /// Rows marked delivered (sent, or covered by a summary that was sent).
        Delivered = "delivered",
        /// Send attempts that failed.
        Failed = "failed",
        /// Pending rows dropped with the channel or not sent (the channel turned off).
        Dropped = "dropped",
    }
}

/// What a write adds to: one of the counters, one of a channel's tallies (kept in the same
/// tables, named `channel.<name>.<tally>`; channel names have no dots), or the times a provider's
/// field held a value NeverMiss does not know (`unknown.<provider>.<field>=<value>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tally {
    Counter(Counter),
    Channel(String, ChannelTally),
    /// (provider, field, value).
    UnknownValue(String, String, String),
}

const CHANNEL_PREFIX: &str = "channel.";
const UNKNOWN_PREFIX: &str = "unknown.";
/// Between an unknown value's field and the value itself (a field's name has dots, and a value
/// may have them too).
const UNKNOWN_VALUE_SEPARATOR: &str = "=";

impl Tally {
    fn name(&self) -> String {
        match self {
            Tally::Counter(counter) => counter.as_str().to_owned(),
            Tally::Channel(channel, tally) => format!("{CHANNEL_PREFIX}{channel}.{}", tally.as_str()),
            Tally::UnknownValue(provider, field, value) => format!("{UNKNOWN_PREFIX}{provider}.{field}{UNKNOWN_VALUE_SEPARATOR}{value}"),
        }
    }
}

impl From<Outcome> for Counter {
    /// The counter of a delivery's outcome.
    fn from(outcome: Outcome) -> Counter {
        match outcome {
            Outcome::Applied => Counter::Applied,
            Outcome::Duplicate => Counter::Duplicates,
            Outcome::Stale => Counter::Stale,
            Outcome::Rejected => Counter::Rejected,
            Outcome::Ignored => Counter::Ignored,
            Outcome::Requested => Counter::CancelRequests,
        }
    }
}

/// Writes additions, summed per counter, to the totals and to the bucket of the UTC hour of `now_ms`,
/// in the rows of `shard`. A tally is the sum of its shards' rows: writers that add to different
/// shards never wait for each other (on PostgreSQL, a row updated by one transaction is locked
/// until its commit, so one row per counter would make every write of a fleet wait for the
/// commit before it). SQLite's single writer uses shard 0.
pub(super) fn add_all(conn: &dyn Db, additions: impl Iterator<Item = (Tally, i64)>, now_ms: i64, shard: i64) -> sql::Result<()> {
    let mut sums: BTreeMap<Tally, i64> = BTreeMap::new();
    for (counter, n) in additions {
        *sums.entry(counter).or_default() += n;
    }
    let hour = now_ms / 3_600_000;
    for (counter, n) in sums.into_iter().filter(|&(_, n)| n != 0) {
        conn.prepare_cached(
            "INSERT INTO counters (name, shard, value) VALUES ($1, $3, $2)
             ON CONFLICT (name, shard) DO UPDATE SET value = counters.value + excluded.value",
        )?
        .execute(params![counter.name(), n, shard])?;
        conn.prepare_cached(
            "INSERT INTO counter_hours (hour, name, shard, value) VALUES ($1, $2, $4, $3)
             ON CONFLICT (hour, name, shard) DO UPDATE SET value = counter_hours.value + excluded.value",
        )?
        .execute(params![hour, counter.name(), n, shard])?;
    }
    Ok(())
}

/// Every counter's total (counters never added to are absent).
pub fn all(conn: &dyn Db) -> sql::Result<BTreeMap<Counter, i64>> {
    let mut stmt = conn.prepare_cached("SELECT name, CAST(sum(value) AS BIGINT) AS total FROM counters GROUP BY name")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>("name")?, r.get::<_, i64>("total")?)))?;
    let mut totals = BTreeMap::new();
    for row in rows {
        let (name, value) = row?;
        if let Some(counter) = Counter::parse(&name) {
            totals.insert(counter, value);
        }
    }
    Ok(totals)
}

/// Every channel's tallies, by channel (tallies never added to are absent).
pub fn of_channels(conn: &dyn Db) -> sql::Result<BTreeMap<String, BTreeMap<ChannelTally, i64>>> {
    let mut stmt =
        conn.prepare_cached("SELECT name, CAST(sum(value) AS BIGINT) AS total FROM counters WHERE name LIKE 'channel.%' GROUP BY name")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>("name")?, r.get::<_, i64>("total")?)))?;
    let mut tallies: BTreeMap<String, BTreeMap<ChannelTally, i64>> = BTreeMap::new();
    for row in rows {
        let (name, value) = row?;
        let parsed = name.strip_prefix(CHANNEL_PREFIX).and_then(|rest| rest.rsplit_once('.'));
        if let Some((channel, tally)) = parsed {
            if let Some(tally) = ChannelTally::parse(tally) {
                tallies.entry(channel.to_owned()).or_default().insert(tally, value);
            }
        }
    }
    Ok(tallies)
}

/// How many times each (provider, field, value) NeverMiss does not know was met.
pub fn of_unknown_values(conn: &dyn Db) -> sql::Result<Vec<(String, String, String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, CAST(sum(value) AS BIGINT) AS total FROM counters WHERE name LIKE 'unknown.%' GROUP BY name ORDER BY name",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>("name")?, r.get::<_, i64>("total")?)))?;
    let mut tallies = Vec::new();
    for row in rows {
        let (name, n) = row?;
        let parsed = name.strip_prefix(UNKNOWN_PREFIX).and_then(|rest| {
            let (provider, rest) = rest.split_once('.')?;
            let (field, value) = rest.split_once(UNKNOWN_VALUE_SEPARATOR)?;
            Some((provider.to_owned(), field.to_owned(), value.to_owned()))
        });
        if let Some((provider, field, value)) = parsed {
            tallies.push((provider, field, value, n));
        }
    }
    Ok(tallies)
}

/// Forgets a channel's tallies (the channel was removed; a new one of that name starts at 0).
pub fn forget_channel(conn: &dyn Db, channel: &str) -> sql::Result<()> {
    // `_` is a wildcard of LIKE, and channel names may hold it.
    let pattern = format!("{CHANNEL_PREFIX}{}.%", channel.replace('_', "\\_"));
    conn.prepare_cached("DELETE FROM counters WHERE name LIKE $1 ESCAPE '\\'")?.execute(params![pattern])?;
    conn.prepare_cached("DELETE FROM counter_hours WHERE name LIKE $1 ESCAPE '\\'")?.execute(params![pattern])?;
    Ok(())
}

/// Counter values per UTC hour since `since_hour` (hours since the epoch), for charts.
pub fn hours(conn: &dyn Db, since_hour: i64) -> sql::Result<Vec<(i64, String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT hour, name, CAST(sum(value) AS BIGINT) AS total FROM counter_hours WHERE hour >= $1 GROUP BY hour, name ORDER BY hour",
    )?;
    let rows = stmt.query_map([since_hour], |r| Ok((r.get("hour")?, r.get("name")?, r.get("total")?)))?;
    rows.collect()
}
