//! Groups of jobs (a sweep of predictions, a batch per shard): a job's `group_name`, the groups'
//! progress, and the one rule of a group's end: when a member reaches a terminal state and no
//! member is left running, the group's end is enqueued once, in the same transaction as that
//! member's end (`member_ended`, called by the merge point).
//!
//! Exactly once across a fleet: `member_ended` first takes the group's row in `job_groups` (an
//! upsert, which on PostgreSQL locks it until the transaction ends), then counts the members. Two
//! processes ending the group's last two members at once are thereby serialized: the second
//! counts after the first committed, and only one of them finds no member running. The row keeps
//! how many members the group had when its end was announced, so a group that gains a job later
//! announces again when that job ends; the outbox's unique key (the group and that count) makes a
//! second enqueue of the same end add nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::outbox::{self, Kind, Subject};
use super::sql::{self, params, Db, OptionalExtension};
use super::Tx;
use crate::job::{rfc3339, JobState, TERMINAL_RANK};

crate::closed_set::closed_set! {
    /// Which of a grouped job's own notifications go out besides its group's (the setting
    /// `group_members`).
    #[ts(export)]
    pub enum MemberNotifications {
        /// Only the group's: one notification when its last job ends.
        Group = "group",
        /// The group's, and at once a member that failed or needs input (a failed shard is
        /// often worth knowing early). The default.
        Failures = "failures",
        /// The group's and every member's.
        Every = "every",
    }
}

/// The setting's key.
pub const MEMBER_NOTIFICATIONS: &str = "group_members";

impl MemberNotifications {
    /// The stored choice (the default when unset or unreadable).
    pub fn of(conn: &dyn Db) -> sql::Result<MemberNotifications> {
        Ok(super::settings::get(conn, MEMBER_NOTIFICATIONS)?
            .as_deref()
            .and_then(MemberNotifications::parse)
            .unwrap_or(MemberNotifications::Failures))
    }

    /// Whether a grouped job that ended in `state` is announced on its own.
    pub fn announces(self, state: JobState) -> bool {
        match self {
            MemberNotifications::Group => false,
            MemberNotifications::Failures => matches!(state, JobState::Failed | JobState::NeedsInput),
            MemberNotifications::Every => true,
        }
    }
}

/// The longest group name kept (a name is a label, not a payload).
pub const MAX_NAME: usize = 100;

/// A group name as given (trimmed), or why it is refused: empty, too long, or with control
/// characters.
pub fn valid_name(name: &str) -> Result<&str, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err("a group name cannot be empty".into());
    }
    if name.chars().count() > MAX_NAME {
        return Err(format!("a group name is at most {MAX_NAME} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("a group name cannot hold control characters".into());
    }
    Ok(name)
}

/// The metadata key that puts a job started elsewhere in a group, where the provider lets the
/// user tag a job with string metadata (OpenAI's responses, batches and fine-tuning jobs:
/// `metadata={"nevermiss_group": "sweep-7"}`).
pub const METADATA_KEY: &str = "nevermiss_group";

/// The group a provider's metadata names (`METADATA_KEY`), when it names a valid one; a name
/// that is not valid (empty, too long) is no group.
pub fn from_metadata(metadata: Option<&std::collections::HashMap<String, String>>) -> Option<String> {
    let name = metadata?.get(METADATA_KEY)?;
    valid_name(name).ok().map(str::to_owned)
}

/// A group's progress, as the admin API and a group's notification show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct GroupSummary {
    pub name: String,
    /// How many jobs it has.
    pub total: i64,
    /// How many are in each state.
    pub by_state: BTreeMap<String, i64>,
    /// How many are not finished.
    pub running: i64,
    /// When its first job was created.
    pub started_at: String,
    /// When its last job ended, once none is running.
    pub finished_at: Option<String>,
    /// From its first job's creation to its last end, once none is running (ms).
    pub duration_ms: Option<i64>,
    /// The job running longest, while some are (its provider and id).
    pub slowest_running: Option<GroupMember>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct GroupMember {
    pub provider: String,
    pub job_id: String,
    pub label: Option<String>,
    pub created_at: String,
}

/// Puts a job in a group unless it is in one already (a job belongs to one group, the first it
/// was put in). True when it joined.
pub fn join(conn: &dyn Db, provider: &str, job_id: &str, group: &str) -> sql::Result<bool> {
    Ok(conn
        .prepare_cached("UPDATE jobs SET group_name = $3 WHERE provider = $1 AND job_id = $2 AND group_name IS NULL")?
        .execute(params![provider, job_id, group])?
        == 1)
}

/// A member of `group` reached a terminal state in this transaction: when none is left running,
/// enqueues the group's end (once per member count). Returns the subject enqueued, if any.
pub fn member_ended(tx: &mut Tx<'_>, group: &str, now: i64) -> sql::Result<Option<Subject>> {
    // Takes the group's row (PostgreSQL: locks it until this transaction ends) before counting.
    let announced: i64 = tx
        .prepare_cached(
            "INSERT INTO job_groups (name) VALUES ($1)
             ON CONFLICT (name) DO UPDATE SET name = excluded.name
             RETURNING announced_total",
        )?
        .query_row([group], |r| r.get("announced_total"))?;
    let (total, running): (i64, i64) = tx
        .prepare_cached(&format!(
            "SELECT count(*) AS total, count(CASE WHEN rank < {TERMINAL_RANK} THEN 1 END) AS running
             FROM jobs WHERE group_name = $1"
        ))?
        .query_row([group], |r| Ok((r.get("total")?, r.get("running")?)))?;
    if running > 0 || total <= announced {
        return Ok(None);
    }
    tx.prepare_cached("UPDATE job_groups SET announced_total = $2, announced_at = $3 WHERE name = $1")?
        .execute(params![group, total, now])?;
    let subject = Subject::Group { group: group.to_owned(), total };
    outbox::enqueue(tx, Kind::GroupEnd, &subject, None, now)?;
    Ok(Some(subject))
}

/// One group's progress, or None when no job is in it.
pub fn summary(conn: &dyn Db, group: &str) -> sql::Result<Option<GroupSummary>> {
    let rows = conn
        .prepare_cached(
            "SELECT state, count(*) AS jobs, min(created_at) AS started_at, max(finished_at) AS finished_at
             FROM jobs WHERE group_name = $1 GROUP BY state",
        )?
        .query([group])?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut by_state = BTreeMap::new();
    let (mut started_at, mut finished_at) = (i64::MAX, None::<i64>);
    for row in &rows {
        by_state.insert(row.get::<_, String>("state")?, row.get::<_, i64>("jobs")?);
        started_at = started_at.min(row.get("started_at")?);
        if let Some(at) = row.get::<_, Option<i64>>("finished_at")? {
            finished_at = Some(finished_at.map_or(at, |f| f.max(at)));
        }
    }
    let total = by_state.values().sum();
    let running: i64 = by_state.iter().filter(|(state, _)| !is_terminal(state)).map(|(_, n)| n).sum();
    let slowest_running = if running > 0 {
        conn.prepare_cached(&format!(
            "SELECT provider, job_id, label, created_at FROM jobs
             WHERE group_name = $1 AND rank < {TERMINAL_RANK} ORDER BY created_at, id LIMIT 1"
        ))?
        .query_row([group], |r| {
            Ok(GroupMember {
                provider: r.get("provider")?,
                job_id: r.get("job_id")?,
                label: r.get("label")?,
                created_at: rfc3339(r.get("created_at")?),
            })
        })
        .optional()?
    } else {
        None
    };
    let finished_at = finished_at.filter(|_| running == 0);
    Ok(Some(GroupSummary {
        name: group.to_owned(),
        total,
        by_state,
        running,
        started_at: rfc3339(started_at),
        finished_at: finished_at.map(rfc3339),
        duration_ms: finished_at.map(|end| (end - started_at).max(0)),
        slowest_running,
    }))
}

fn is_terminal(state: &str) -> bool {
    JobState::parse(state).is_some_and(|s| s.rank() == TERMINAL_RANK)
}

/// The groups, the most recently started first (at most `limit`).
pub fn list(conn: &dyn Db, limit: i64) -> sql::Result<Vec<GroupSummary>> {
    let names: Vec<String> = conn
        .prepare_cached(
            "SELECT group_name FROM jobs WHERE group_name IS NOT NULL
             GROUP BY group_name ORDER BY max(id) DESC LIMIT $1",
        )?
        .query_map([limit], |r| r.get("group_name"))?
        .collect::<sql::Result<_>>()?;
    let mut groups = Vec::with_capacity(names.len());
    for name in names {
        if let Some(summary) = summary(conn, &name)? {
            groups.push(summary);
        }
    }
    Ok(groups)
}

/// The members of a group, the first tracked first: what `wait --group` prints at the end.
pub fn members(conn: &dyn Db, group: &str) -> sql::Result<Vec<crate::job::Job>> {
    conn.prepare_cached(&format!("SELECT {} FROM jobs WHERE group_name = $1 ORDER BY id", super::jobs::job_columns!()))?
        .query_map([group], super::jobs::job_from_row)?
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_names_a_group_by_its_key_and_only_a_valid_one() {
        let tagged =
            std::collections::HashMap::from([(METADATA_KEY.to_owned(), " sweep-7 ".to_owned()), ("other".to_owned(), "x".to_owned())]);
        assert_eq!(from_metadata(Some(&tagged)).as_deref(), Some("sweep-7"));
        let other = std::collections::HashMap::from([("group".to_owned(), "sweep-7".to_owned())]);
        assert_eq!(from_metadata(Some(&other)), None);
        let too_long = std::collections::HashMap::from([(METADATA_KEY.to_owned(), "g".repeat(MAX_NAME + 1))]);
        assert_eq!(from_metadata(Some(&too_long)), None);
        assert_eq!(from_metadata(None), None);
    }
}
