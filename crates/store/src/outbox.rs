//! The `outbox` table: the side effects to deliver, one row per subject and kind (its unique key),
//! enqueued in the transaction of the write that caused them. `enqueue` is the one way in, for
//! every producer (the merge point's terminal notification, reconcile's stuck alert, the tunnel's
//! down alert); the engine's `outbox` delivers the rows.

use super::sql::{self, params, Db};

use super::counters::{ChannelTally, Counter};
use super::sql::{Dialect, OptionalExtension};
use super::Tx;
use crate::closed_set::closed_set;
use crate::job::{parse_rfc3339, rfc3339, JobKey, JobResult, JobState};

closed_set! {
    /// What kind of side effect a row is.
    #[ts(export, rename = "NotificationKind")]
    pub enum Kind {
        /// The job reached a terminal state.
        Terminal = "terminal",
        /// The job has been unfinished for longer than the stuck threshold (its kind has too
        /// little history for "slower than usual").
        Stuck = "stuck",
        /// The job runs much longer than jobs of its kind usually take (the engine's
        /// `expected`): it replaces the stuck alert once the kind has enough history. A job gets
        /// one of the two, never both (`enqueue`).
        Slow = "slow",
        /// The tunnel has been down past its alert threshold (one per down period).
        TunnelDown = "tunnel_down",
        /// Polling gave up on the unfinished job (it can never be polled): one alert per job.
        Abandoned = "abandoned",
        /// The last running job of a group ended: one notification for the group (again when
        /// the group gains a job after that and it ends too).
        GroupEnd = "group_end",
    }
}

/// What a row is about: a job, or a tunnel's down period.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[serde(tag = "about", rename_all = "snake_case")]
#[ts(export)]
pub enum Subject {
    Job {
        provider: String,
        job_id: String,
    },
    /// `tunnel` is the tunnel's kind (`cloudflared`, `ngrok`, ...), `down_since` when its down
    /// period began (ms): one alert per period.
    Tunnel {
        tunnel: String,
        down_since: i64,
    },
    /// A group's end, when it had `total` members (a group that grows ends again).
    Group {
        group: String,
        total: i64,
    },
}

/// The `provider` column of a tunnel's rows.
const TUNNEL: &str = "tunnel";
/// The `provider` column of a group's rows (no provider is named so).
const GROUP: &str = "group";

impl Subject {
    pub fn job(provider: &str, job_id: &str) -> Subject {
        Subject::Job { provider: provider.to_owned(), job_id: job_id.to_owned() }
    }

    /// The row's key columns (provider, job_id).
    fn key(&self) -> (String, String) {
        match self {
            Subject::Job { provider, job_id } => (provider.clone(), job_id.clone()),
            Subject::Tunnel { tunnel, down_since } => (TUNNEL.to_owned(), format!("{tunnel}@{}", rfc3339(*down_since))),
            Subject::Group { group, total } => (GROUP.to_owned(), format!("{group}@{total}")),
        }
    }

    fn from_key(provider: String, job_id: String) -> Subject {
        if provider == TUNNEL {
            if let Some((tunnel, since)) = job_id.split_once('@') {
                if let Some(down_since) = parse_rfc3339(since) {
                    return Subject::Tunnel { tunnel: tunnel.to_owned(), down_since };
                }
            }
        }
        if provider == GROUP {
            if let Some((group, total)) = job_id.rsplit_once('@').and_then(|(g, t)| Some((g, t.parse().ok()?))) {
                return Subject::Group { group: group.to_owned(), total };
            }
        }
        Subject::Job { provider, job_id }
    }
}

/// Enqueues one side effect for every channel that is on and announces it, once per channel: a
/// second enqueue of the same subject and kind adds nothing. `state` is the job's state it
/// announces (terminal and stuck rows). A terminal row goes to the channels whose outcomes hold
/// its state, a stuck or slower-than-usual alert to those holding `stuck`; polling abandoned and the tunnel down go to
/// every channel that is on (not the user's to mute). Counts `notifications_enqueued` and each
/// channel's `enqueued`; returns the channels that got a new row.
pub fn enqueue(tx: &mut Tx<'_>, kind: Kind, subject: &Subject, state: Option<JobState>, now: i64) -> sql::Result<Vec<String>> {
    enqueue_due(tx, kind, subject, state, now, now)
}

/// `enqueue`, the rows due at `due` rather than at once (a group's end waits out its grace).
#[tracing::instrument(name = "enqueue", level = "debug", skip_all, fields(kind = kind.as_str(), ?subject, added = tracing::field::Empty))]
pub fn enqueue_due(
    tx: &mut Tx<'_>,
    kind: Kind,
    subject: &Subject,
    state: Option<JobState>,
    now: i64,
    due: i64,
) -> sql::Result<Vec<String>> {
    let (provider, job_id) = subject.key();
    let announces: Option<&str> = match kind {
        Kind::Terminal => state.map(JobState::announced_as),
        Kind::Stuck | Kind::Slow => Some("stuck"),
        Kind::Abandoned | Kind::TunnelDown | Kind::GroupEnd => None,
    };
    // A job is late once: stuck or slower than usual, whichever came first (a kind may reach
    // enough history while one of its jobs runs): a channel that has the one gets not the other.
    let excludes: Option<&str> = match kind {
        Kind::Stuck => Some(Kind::Slow.as_str()),
        Kind::Slow => Some(Kind::Stuck.as_str()),
        Kind::Terminal | Kind::Abandoned | Kind::TunnelDown | Kind::GroupEnd => None,
    };
    let channels: Vec<String> = tx
        .prepare_cached(
            "INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, next_attempt_at)
             SELECT c.name, $1, $2, $3, $4, $5, $8 FROM channels c
             WHERE c.enabled = 1 AND (CAST($6 AS TEXT) IS NULL OR c.outcomes LIKE '%,' || CAST($6 AS TEXT) || ',%')
               AND (CAST($7 AS TEXT) IS NULL OR NOT EXISTS (SELECT 1 FROM outbox x WHERE x.channel = c.name
                    AND x.provider = $1 AND x.job_id = $2 AND x.kind = CAST($7 AS TEXT)))
             ON CONFLICT (channel, provider, job_id, kind) DO NOTHING
             RETURNING channel",
        )?
        .query_map(params![provider, job_id, kind.as_str(), state.map(JobState::as_str), now, announces, excludes, due], |r| r.get(0))?
        .collect::<sql::Result<_>>()?;
    tx.count(Counter::NotificationsEnqueued, channels.len() as i64);
    for channel in &channels {
        tx.count_channel(channel, ChannelTally::Enqueued, 1);
    }
    tracing::Span::current().record("added", channels.len());
    tracing::debug!(?channels, "enqueued");
    Ok(channels)
}

/// A row due for delivery, with what its job says about itself.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: i64,
    /// The channel it goes to.
    pub channel: String,
    pub kind: Kind,
    pub subject: Subject,
    pub state: Option<JobState>,
    pub attempts: i64,
    pub label: Option<String>,
    /// The job's error; for an `Abandoned` row, why polling gave up on it (its last poll error).
    pub error: Option<String>,
    pub job_created_at: Option<i64>,
    pub job_finished_at: Option<i64>,
    /// What the job produced, when known.
    pub result: Option<JobResult>,
    /// The job's page on the provider's site, when known.
    pub provider_url: Option<String>,
    /// The job's kind, when known (what "usually" is measured over).
    pub job_kind: Option<String>,
    /// Since when the job runs as its kind's durations are measured: the provider's start, else
    /// when NeverMiss first heard of it.
    pub job_since: Option<i64>,
}

/// What `due_from_row` reads: an outbox row (`o`) and its job (`j`).
const DUE_COLUMNS: &str = "o.id AS id, o.kind AS kind, o.provider AS provider, o.job_id AS job_id, o.state AS state, \
                           o.attempts AS attempts, j.label AS label, \
                           CASE WHEN o.kind = 'abandoned' THEN j.poll_error ELSE j.error END AS error, \
                           j.created_at AS job_created_at, j.finished_at AS job_finished_at, o.channel AS channel, \
                           j.result AS result, j.provider_url AS provider_url, j.job_kind AS job_kind, \
                           COALESCE(j.started_at, j.created_at) AS job_since";

fn due_from_row(row: &sql::Row) -> sql::Result<Due> {
    let kind: String = row.get("kind")?;
    let state: Option<String> = row.get("state")?;
    Ok(Due {
        id: row.get("id")?,
        kind: Kind::parse(&kind).unwrap_or(Kind::Terminal),
        subject: Subject::from_key(row.get("provider")?, row.get("job_id")?),
        state: state.as_deref().and_then(JobState::parse),
        attempts: row.get("attempts")?,
        label: row.get("label")?,
        error: row.get("error")?,
        job_created_at: row.get("job_created_at")?,
        job_finished_at: row.get("job_finished_at")?,
        channel: row.get("channel")?,
        result: row.get::<_, Option<String>>("result")?.as_deref().and_then(JobResult::from_column),
        provider_url: row.get("provider_url")?,
        job_kind: row.get("job_kind")?,
        job_since: row.get("job_since")?,
    })
}

/// Claims up to `limit` rows for delivery by `node`, until `until` (ms): the rows due at `now`,
/// and those `node` claimed before and has not delivered (a restarted process takes back at once
/// what it held when it stopped). Each row is claimed by one process of a fleet: the claim is a
/// guarded write (`next_attempt_at` moved to `until`, re-checked on the row itself), and on
/// PostgreSQL rows another process is claiming are skipped rather than waited for. A claimer that
/// dies leaves its rows to the others once `until` has passed. Rows of a hub's devices are not
/// claimed here: each device takes its own (`for_device`); nor are the rows of a channel in an
/// outage before its next attempt (`channels::outage`): they wait for it together.
pub fn claim(conn: &dyn Db, node: &str, now: i64, until: i64, limit: i64) -> sql::Result<Vec<Due>> {
    let skip_locked = match conn.dialect() {
        Dialect::Sqlite => "",
        Dialect::Postgres => " FOR UPDATE OF o SKIP LOCKED",
    };
    let candidates = conn
        .prepare_cached(&format!(
            "SELECT {DUE_COLUMNS}
             FROM outbox o LEFT JOIN jobs j ON j.provider = o.provider AND j.job_id = o.job_id
             WHERE o.delivered_at IS NULL AND (o.next_attempt_at <= $1 OR o.claimed_by = $3)
               AND o.channel NOT IN (SELECT name FROM channels WHERE kind = 'device' OR retry_at > $1)
             ORDER BY o.next_attempt_at, o.id LIMIT $2{skip_locked}"
        ))?
        .query_map(params![now, limit, node], due_from_row)?
        .collect::<sql::Result<Vec<Due>>>()?;
    if candidates.is_empty() {
        return Ok(candidates);
    }
    let ids: Vec<i64> = candidates.iter().map(|due| due.id).collect();
    let of_ids = sql::id_in_json(conn.dialect(), "id", 1);
    let taken: Vec<i64> = conn
        .prepare_cached(&format!(
            "UPDATE outbox SET claimed_by = $2, next_attempt_at = $3
             WHERE {of_ids} AND delivered_at IS NULL AND (next_attempt_at <= $4 OR claimed_by = $2) RETURNING id"
        ))?
        .query_map(params![sql::json_batch(&ids)?, node, until, now], |row| row.get("id"))?
        .collect::<sql::Result<_>>()?;
    Ok(candidates.into_iter().filter(|due| taken.contains(&due.id)).collect())
}

/// When the next pending row `claim` takes is due (ms), if any is pending: a row of a channel
/// in an outage at the channel's next attempt; a device's rows not at all (the device takes
/// them when it connects).
pub fn next_due_at(conn: &dyn Db) -> sql::Result<Option<i64>> {
    conn.query_row(
        "SELECT min(CASE WHEN c.retry_at > o.next_attempt_at THEN c.retry_at ELSE o.next_attempt_at END)
         FROM outbox o LEFT JOIN channels c ON c.name = o.channel
         WHERE o.delivered_at IS NULL AND (c.kind IS NULL OR c.kind <> 'device')",
        [],
        |r| r.get(0),
    )
}

/// A delivery attempt failed: its count, when to try again, and why.
pub fn attempt_failed(conn: &dyn Db, id: i64, attempts: i64, next_attempt_at: i64, error: &str) -> sql::Result<()> {
    conn.prepare_cached("UPDATE outbox SET attempts = $2, next_attempt_at = $3, last_error = $4, claimed_by = NULL WHERE id = $1")?
        .execute(params![id, attempts, next_attempt_at, error])?;
    Ok(())
}

/// Claimed rows of a channel in an outage put back, not sent: they wait for the channel's next
/// attempt at `until` (ms), with its error, their own attempts unchanged.
pub fn wait_for_channel(conn: &dyn Db, ids: &[i64], until: i64, error: &str) -> sql::Result<()> {
    for id in ids {
        conn.prepare_cached(
            "UPDATE outbox SET next_attempt_at = $2, last_error = $3, claimed_by = NULL WHERE id = $1 AND delivered_at IS NULL",
        )?
        .execute(params![id, until, error])?;
    }
    Ok(())
}

/// Marks a row delivered, once: counts `notifications_delivered` and its channel's `delivered`,
/// and returns true the first time.
pub fn mark_delivered(tx: &mut Tx<'_>, id: i64, now: i64) -> sql::Result<bool> {
    Ok(settle(tx, &[id], now, ChannelTally::Delivered)? == 1)
}

/// Settles rows, each once, in one statement: `Delivered` (as `mark_delivered`) or `Dropped` (not
/// sent: the channel was turned off after they were enqueued; done in the record, counted as the
/// channel's `dropped`). Counts `notifications_delivered` and each channel's tally; returns how many
/// were settled by this call.
pub fn settle(tx: &mut Tx<'_>, ids: &[i64], now: i64, tally: ChannelTally) -> sql::Result<usize> {
    if ids.is_empty() {
        return Ok(0);
    }
    let of_ids = sql::id_in_json(tx.dialect(), "id", 1);
    let channels: Vec<String> = tx
        .prepare_cached(&format!(
            "UPDATE outbox SET delivered_at = $2, attempts = attempts + 1 WHERE {of_ids} AND delivered_at IS NULL RETURNING channel"
        ))?
        .query_map(params![sql::json_batch(&ids)?, now], |row| row.get("channel"))?
        .collect::<sql::Result<_>>()?;
    tx.count(Counter::NotificationsDelivered, channels.len() as i64);
    let mut counted: Vec<(&str, i64)> = Vec::new();
    for channel in &channels {
        match counted.iter_mut().find(|(name, _)| name == channel) {
            Some((_, n)) => *n += 1,
            None => counted.push((channel, 1)),
        }
    }
    for (channel, n) in counted {
        tx.count_channel(channel, tally, n);
    }
    Ok(channels.len())
}

/// Puts claimed rows back until `until` (ms), without counting an attempt: their channel is in
/// its quiet hours.
pub fn defer(conn: &dyn Db, ids: &[i64], until: i64) -> sql::Result<()> {
    for id in ids {
        conn.prepare_cached("UPDATE outbox SET next_attempt_at = $2, claimed_by = NULL WHERE id = $1 AND delivered_at IS NULL")?
            .execute(params![id, until])?;
    }
    Ok(())
}

/// A channel's pending rows are due now (its settings changed: a fixed URL, quiet hours ended
/// by hand): what waited for a retry or for the quiet hours to end goes at once. Rows a process
/// is delivering are left to it.
pub fn due_now(conn: &dyn Db, channel: &str, now: i64) -> sql::Result<usize> {
    conn.prepare_cached("UPDATE outbox SET next_attempt_at = $2 WHERE channel = $1 AND delivered_at IS NULL AND claimed_by IS NULL AND next_attempt_at > $2")?
        .execute(params![channel, now])
}

/// A device's undelivered rows after `after` (an outbox id), oldest first: what the device has
/// not acknowledged. Not claimed: the device is the only one that takes its rows, and it
/// acknowledges what it showed (`mark_delivered`).
pub fn for_device(conn: &dyn Db, device: &str, after: i64, limit: i64) -> sql::Result<Vec<Due>> {
    conn.prepare_cached(&format!(
        "SELECT {DUE_COLUMNS}
         FROM outbox o LEFT JOIN jobs j ON j.provider = o.provider AND j.job_id = o.job_id
         WHERE o.channel = $1 AND o.delivered_at IS NULL AND o.id > $2
         ORDER BY o.id LIMIT $3"
    ))?
    .query_map(params![device, after, limit], due_from_row)?
    .collect()
}

/// The undelivered row `id` of `channel`, if it is one.
pub fn pending_of_channel(conn: &dyn Db, channel: &str, id: i64) -> sql::Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM outbox WHERE id = $1 AND channel = $2 AND delivered_at IS NULL")?
        .query_row(params![id, channel], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Deletes up to `batch` rows delivered before `cutoff` (ms) whose unique key is no longer needed
/// to keep them from being enqueued again: a terminal row (a job finishes once), a stuck alert of a
/// job that has finished or is gone, a tunnel-down alert of a period that has ended (a later
/// period was alerted). Returns how many.
pub fn purge_delivered_before(conn: &dyn Db, cutoff: i64, batch: i64) -> sql::Result<usize> {
    conn.prepare_cached(&format!(
        "DELETE FROM outbox WHERE id IN (
           SELECT o.id FROM outbox o WHERE o.delivered_at < $1 AND (
               o.kind = '{terminal}'
            OR (o.kind IN ('{stuck}', '{slow}') AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.provider = o.provider
                                                   AND j.job_id = o.job_id AND j.rank < {terminal_rank}))
            OR (o.kind = '{tunnel}' AND EXISTS (SELECT 1 FROM outbox n WHERE n.kind = '{tunnel}' AND n.id > o.id)))
           ORDER BY o.id LIMIT $2)",
        terminal = Kind::Terminal.as_str(),
        stuck = Kind::Stuck.as_str(),
        slow = Kind::Slow.as_str(),
        tunnel = Kind::TunnelDown.as_str(),
        terminal_rank = crate::job::TERMINAL_RANK,
    ))?
    .execute(params![cutoff, batch])
}

/// Deletes a job's rows (the job is archived, none of its rows pending). Returns how many.
pub fn delete_of_job(conn: &dyn Db, key: &JobKey) -> sql::Result<usize> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached("DELETE FROM outbox WHERE provider = $1 AND job_id = $2 AND delivered_at IS NOT NULL")?
        .execute(params![provider, job_id])
}

/// How many rows the outbox holds, delivered or not.
pub fn count(conn: &dyn Db) -> sql::Result<i64> {
    conn.query_row("SELECT count(*) FROM outbox", [], |r| r.get(0))
}
