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
//!
//! A sweep's jobs are often started one after another: its first may end before the last is
//! known. So a group's end waits `group_end_grace_secs` (default 60 s) before it is sent, and one
//! that a job joined in the meantime is dropped when it comes due (`GroupSummary::overtaken`): the
//! new job's end announces the group again, with every member counted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::outbox::{self, Kind, Subject};
use super::sql::{self, params, Db};
use super::Tx;
use crate::job::{rfc3339, JobKey, JobState, TERMINAL_RANK};

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

/// The setting: how long a group's end waits before it is sent, in seconds (see the module's
/// comment); the same key and default in PostgreSQL's push path.
pub const END_GRACE_SECS: &str = "group_end_grace_secs";
pub const DEFAULT_END_GRACE_SECS: i64 = 60;

/// The grace in force, in milliseconds.
pub fn end_grace_ms(conn: &dyn Db) -> sql::Result<i64> {
    let secs = super::settings::get(conn, END_GRACE_SECS)?.and_then(|v| v.trim().parse::<i64>().ok());
    Ok(1000 * secs.unwrap_or(DEFAULT_END_GRACE_SECS).max(0))
}

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
            MemberNotifications::Failures => state.is_urgent_end(),
            MemberNotifications::Every => true,
        }
    }
}

/// The longest group name kept (a name is a label, not a payload).
pub const MAX_NAME: usize = 100;

/// Why a group name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadGroupName {
    #[error("a group name cannot be empty")]
    Empty,
    #[error("a group name is at most {MAX_NAME} characters")]
    TooLong,
    #[error("a group name cannot hold control characters")]
    Control,
}

/// A group name as given (trimmed), or why it is refused.
pub fn valid_name(name: &str) -> Result<&str, BadGroupName> {
    let name = name.trim();
    if name.is_empty() {
        return Err(BadGroupName::Empty);
    }
    if name.chars().count() > MAX_NAME {
        return Err(BadGroupName::TooLong);
    }
    if name.chars().any(char::is_control) {
        return Err(BadGroupName::Control);
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
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

impl GroupSummary {
    /// Whether a group's end announced at `announced_total` members was overtaken: a job joined
    /// the group since (it may still run), and its end announces the group again.
    pub fn overtaken(&self, announced_total: i64) -> bool {
        self.total > announced_total || self.running > 0
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct GroupMember {
    pub provider: String,
    pub job_id: String,
    pub label: Option<String>,
    pub created_at: String,
}

/// Puts a job in a group unless it is in one already (a job belongs to one group, the first it
/// was put in). True when it joined.
pub fn join(conn: &dyn Db, key: &JobKey, group: &str) -> sql::Result<bool> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
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
    let due = now + end_grace_ms(tx)?;
    outbox::enqueue_due(tx, Kind::GroupEnd, &subject, None, now, due)?;
    Ok(Some(subject))
}

/// The groups' progress in one query, the same text on both databases: the `limit` groups whose
/// newest job is newest among the grouped jobs from row `$3` on (`newest_groups_from`), or the one
/// group `only` names, each group's members counted per state
/// with their first start and last end, and the member running longest (per group, the first of
/// its unfinished members by creation: an indexed look-up of its own members, not a pass over every
/// grouped job). One row per group and state, folded by `fold`.
const PROGRESS: &str = "WITH recent AS (
         SELECT group_name, max(id) AS newest FROM jobs
         WHERE group_name IS NOT NULL AND (CAST($2 AS TEXT) IS NULL OR group_name = CAST($2 AS TEXT)) AND id >= $3
         GROUP BY group_name ORDER BY max(id) DESC LIMIT $1),
     counts AS (
         SELECT j.group_name, j.state, count(*) AS jobs, min(COALESCE(j.started_at, j.created_at)) AS started_at, max(j.finished_at) AS finished_at
         FROM recent r JOIN jobs j ON j.group_name = r.group_name GROUP BY j.group_name, j.state),
     slowest AS (
         SELECT r.group_name, (SELECT j.id FROM jobs j WHERE j.group_name = r.group_name AND j.rank < 3
                               ORDER BY j.created_at, j.id LIMIT 1) AS member
         FROM recent r)
     SELECT c.group_name AS name, c.state AS state, c.jobs AS jobs, c.started_at AS started_at, c.finished_at AS finished_at,
            s.provider AS slowest_provider, s.job_id AS slowest_job_id, s.label AS slowest_label, s.created_at AS slowest_created_at
     FROM counts c JOIN recent r ON r.group_name = c.group_name JOIN slowest l ON l.group_name = c.group_name
          LEFT JOIN jobs s ON s.id = l.member
     ORDER BY r.newest DESC, c.state";

/// One group's progress, or None when no job is in it.
pub fn summary(conn: &dyn Db, group: &str) -> sql::Result<Option<GroupSummary>> {
    Ok(progress(conn, 1, Some(group))?.pop())
}

/// The groups, the most recently started first (at most `limit`): one query, whatever their
/// number.
pub fn list(conn: &dyn Db, limit: i64) -> sql::Result<Vec<GroupSummary>> {
    progress(conn, limit, None)
}

fn progress(conn: &dyn Db, limit: i64, only: Option<&str>) -> sql::Result<Vec<GroupSummary>> {
    let from = match only {
        Some(_) => 0,
        None => newest_groups_from(conn, limit)?,
    };
    let rows = conn.prepare_cached(PROGRESS)?.query(params![limit, only, from])?;
    fold(&rows)
}

/// The newest grouped jobs read first, this many per group asked for, then eight times as many
/// each time they hold too few groups.
const GROUPED_JOBS_PER_GROUP: i64 = 20;

/// The row id from which the grouped jobs hold the `limit` groups whose newest job is newest: the
/// newest grouped jobs (`jobs_grouped`, V18/V13) read until they name `limit` groups or there are
/// no more, so that listing the groups reads about as many jobs as those groups have, however many
/// jobs and groups are kept. (Each group named there has its newest job there: it is the group's
/// first met, newest first.)
fn newest_groups_from(conn: &dyn Db, limit: i64) -> sql::Result<i64> {
    let mut window = limit.max(1) * GROUPED_JOBS_PER_GROUP;
    loop {
        let (from, read, groups): (Option<i64>, i64, i64) = conn
            .prepare_cached(
                "SELECT min(id) AS from_id, count(*) AS read, count(DISTINCT group_name) AS groups FROM (
                     SELECT id, group_name FROM jobs WHERE group_name IS NOT NULL ORDER BY id DESC LIMIT $1) newest",
            )?
            .query_row([window], |r| Ok((r.get("from_id")?, r.get("read")?, r.get("groups")?)))?;
        if groups >= limit || read < window {
            return Ok(from.unwrap_or(0));
        }
        window = window.saturating_mul(8);
    }
}

/// A group's rows of `PROGRESS` (one per state, a group's rows together) as its summary.
fn fold(rows: &[sql::Row]) -> sql::Result<Vec<GroupSummary>> {
    let mut groups: Vec<GroupSummary> = Vec::new();
    // Each group's first start and last end (ms), beside it.
    let mut spans: Vec<(i64, Option<i64>)> = Vec::new();
    for row in rows {
        let name: String = row.get("name")?;
        if groups.last().map(|g| &g.name) != Some(&name) {
            let slowest_running = match row.get::<_, Option<String>>("slowest_job_id")? {
                Some(job_id) => Some(GroupMember {
                    provider: row.get("slowest_provider")?,
                    job_id,
                    label: row.get("slowest_label")?,
                    created_at: rfc3339(row.get("slowest_created_at")?),
                }),
                None => None,
            };
            groups.push(GroupSummary {
                name,
                total: 0,
                by_state: BTreeMap::new(),
                running: 0,
                started_at: String::new(),
                finished_at: None,
                duration_ms: None,
                slowest_running,
            });
            spans.push((i64::MAX, None));
        }
        let (group, (start, end)) = (groups.last_mut().expect("pushed above"), spans.last_mut().expect("pushed above"));
        let (state, jobs): (String, i64) = (row.get("state")?, row.get("jobs")?);
        *start = (*start).min(row.get("started_at")?);
        group.total += jobs;
        if !is_terminal(&state) {
            group.running += jobs;
        }
        group.by_state.insert(state, jobs);
        if let Some(at) = row.get::<_, Option<i64>>("finished_at")? {
            *end = Some(end.map_or(at, |e: i64| e.max(at)));
        }
    }
    for (group, (start, end)) in groups.iter_mut().zip(spans) {
        let finished_at = end.filter(|_| group.running == 0);
        group.started_at = rfc3339(start);
        group.finished_at = finished_at.map(rfc3339);
        group.duration_ms = finished_at.map(|end| (end - start).max(0));
    }
    Ok(groups)
}

fn is_terminal(state: &str) -> bool {
    JobState::parse(state).is_some_and(|s| s.rank() == TERMINAL_RANK)
}

/// Removes the rows of `job_groups` whose group has no job left (retention archived them all);
/// returns how many. A group that gains a job later starts a new row, and announces its end
/// again.
pub fn purge_empty(conn: &dyn Db) -> sql::Result<usize> {
    conn.prepare_cached("DELETE FROM job_groups WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.group_name = job_groups.name)")?.execute([])
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

    #[test]
    fn a_group_name_is_trimmed_or_refused_saying_why() {
        assert_eq!(valid_name(" sweep-7 "), Ok("sweep-7"));
        assert_eq!(valid_name("  "), Err(BadGroupName::Empty));
        assert_eq!(valid_name(&"g".repeat(MAX_NAME + 1)), Err(BadGroupName::TooLong));
        assert_eq!(valid_name("a\tb"), Err(BadGroupName::Control));
        assert_eq!(BadGroupName::TooLong.to_string(), "a group name is at most 100 characters");
    }
}

#[cfg(test)]
mod grace_tests {
    /// PostgreSQL's push path reads the same setting with the same default as `end_grace_ms`.
    #[test]
    fn the_push_path_waits_the_same_grace() {
        let sql = include_str!("../postgres/push_path.sql");
        let read = format!(
            "coalesce((SELECT CAST(value AS BIGINT) FROM settings WHERE key = '{}'), {})",
            super::END_GRACE_SECS,
            super::DEFAULT_END_GRACE_SECS
        );
        assert!(sql.contains(&read), "push_path.sql does not read {read}");
        assert!(sql.contains("v_ending.now + v_group_grace"), "push_path.sql's group end is not due after its grace");
    }
}
