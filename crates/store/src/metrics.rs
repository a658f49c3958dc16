//! The store's part of `GET /api/metrics` (contract §3): the counters, the gauges kept as counts
//! at write (jobs per state, jobs not found or abandoned), the pending notifications (from their
//! partial index), the last pass and the completions per day: no figure is counted over the jobs
//! at read. Each provider's polling health is the reconciler's, added above the store.

use std::collections::BTreeMap;

use super::sql::{self, Db};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::counters::{self, Counter};
use super::passes::{self, PassSummary};
use super::{jobs, settings};
use crate::job::rfc3339;

/// The `settings` key of the last reconcile pass's time (ms).
pub const LAST_RECONCILE_AT: &str = "last_reconcile_at";

/// (Made into TypeScript only inside `Metrics`, which flattens it.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
pub struct StoreMetrics {
    /// Every request to a known provider's hook that got as far as its signature:
    /// applied + duplicates + stale + rejected + ignored + bad_signatures.
    pub deliveries_total: i64,
    pub applied: i64,
    pub duplicates: i64,
    pub stale: i64,
    pub bad_signatures: i64,
    pub rejected: i64,
    /// Verified events of a kind NeverMiss does not act on (answered 200 `ignored`).
    pub ignored: i64,
    pub reconcile_passes: i64,
    /// Terminal states first learned by polling where a webhook was expected (a webhook went
    /// missing: the provider sends them for that kind of job and its secret is set).
    pub reconcile_rescues: i64,
    /// Terminal states first learned by polling where no webhook was expected (Anthropic
    /// batches, fal jobs, providers without a webhook secret): counted apart from rescues.
    pub poll_only_completions: i64,
    pub reconcile_errors: i64,
    pub stuck_alerts: i64,
    /// "Slower than usual" alerts: jobs running much longer than their kind usually takes
    /// (they replace the stuck alert once a kind has enough history).
    pub slow_alerts: i64,
    pub notifications_enqueued: i64,
    pub notifications_delivered: i64,
    /// Deliveries for a provider with no webhook secret configured (answered 503 so they retry).
    pub unconfigured_deliveries: i64,
    /// Jobs first learned by listing a provider's jobs (discovery), not by a webhook or `track`.
    pub jobs_discovered: i64,
    /// Cancel requests sent to a provider (accepted or refused), each on its job's timeline.
    pub cancel_requests: i64,
    pub notifications_pending: i64,
    pub jobs_by_state: BTreeMap<String, i64>,
    pub last_reconcile_at: Option<String>,
    /// Unfinished jobs the provider answered 404 for at the last poll (not yet abandoned).
    pub jobs_not_found: i64,
    /// Unfinished jobs polling has given up on (abandoned: they end by webhook only).
    pub jobs_abandoned: i64,
    /// The last reconcile pass: when, how long, what it did.
    pub last_pass: Option<PassSummary>,
    /// Completions per UTC day (the last 14 days that had any): within the SLA, by pull, and
    /// without a known start (counted apart from the SLA).
    pub completions_by_day: Vec<DailyCompletions>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct DailyCompletions {
    pub day: String,
    pub finished: i64,
    /// Finished within the SLA, measured from the provider's own start time when it gave one,
    /// else from when NeverMiss first heard of the job.
    pub within_sla: i64,
    pub by_pull: i64,
    /// First heard of already finished, with no start time from the provider: how long they took
    /// is unknown, so they are neither within the SLA nor breaches.
    pub without_start: i64,
}

pub fn read(conn: &dyn Db) -> sql::Result<StoreMetrics> {
    let totals = counters::all(conn)?;
    let total = |counter: Counter| totals.get(&counter).copied().unwrap_or(0);
    let mut completions_by_day = conn
        .prepare_cached(
            "SELECT day, CAST(sum(finished) AS BIGINT) AS finished, CAST(sum(within_sla) AS BIGINT) AS within_sla,
                    CAST(sum(by_pull) AS BIGINT) AS by_pull, CAST(sum(without_start) AS BIGINT) AS without_start
             FROM daily_completions
             GROUP BY day ORDER BY day DESC LIMIT 14",
        )?
        .query_map([], |r| {
            Ok(DailyCompletions {
                day: r.get("day")?,
                finished: r.get("finished")?,
                within_sla: r.get("within_sla")?,
                by_pull: r.get("by_pull")?,
                without_start: r.get("without_start")?,
            })
        })?
        .collect::<sql::Result<Vec<_>>>()?;
    completions_by_day.reverse();
    let unfinished = unfinished_counts(conn)?;
    Ok(StoreMetrics {
        deliveries_total: total(Counter::DeliveriesTotal),
        applied: total(Counter::Applied),
        duplicates: total(Counter::Duplicates),
        stale: total(Counter::Stale),
        bad_signatures: total(Counter::BadSignatures),
        rejected: total(Counter::Rejected),
        ignored: total(Counter::Ignored),
        reconcile_passes: total(Counter::ReconcilePasses),
        reconcile_rescues: total(Counter::ReconcileRescues),
        poll_only_completions: total(Counter::PollOnlyCompletions),
        reconcile_errors: total(Counter::ReconcileErrors),
        stuck_alerts: total(Counter::StuckAlerts),
        slow_alerts: total(Counter::SlowAlerts),
        notifications_enqueued: total(Counter::NotificationsEnqueued),
        notifications_delivered: total(Counter::NotificationsDelivered),
        unconfigured_deliveries: total(Counter::UnconfiguredDeliveries),
        jobs_discovered: total(Counter::JobsDiscovered),
        cancel_requests: total(Counter::CancelRequests),
        notifications_pending: unfinished.pending_notifications,
        jobs_by_state: jobs::count_by_state(conn)?,
        last_reconcile_at: settings::get(conn, LAST_RECONCILE_AT)?.and_then(|v| v.parse::<i64>().ok()).map(rfc3339),
        jobs_not_found: unfinished.not_found,
        jobs_abandoned: unfinished.abandoned,
        last_pass: passes::last(conn, 1)?.into_iter().next(),
        completions_by_day,
    })
}

/// The counts the schema keeps of unfinished jobs (`unfinished_counts`, summed over its shards),
/// and the notifications not yet delivered, counted from their partial index (as many rows as
/// wait, however many jobs are kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnfinishedCounts {
    /// Unfinished jobs polling has given up on.
    pub abandoned: i64,
    /// Unfinished jobs the provider answered 404 for at the last poll, not yet abandoned.
    pub not_found: i64,
    /// Notifications not yet delivered, on every channel.
    pub pending_notifications: i64,
}

pub fn unfinished_counts(conn: &dyn Db) -> sql::Result<UnfinishedCounts> {
    let mut counts = UnfinishedCounts {
        pending_notifications: conn
            .prepare_cached("SELECT count(*) FROM outbox WHERE delivered_at IS NULL")?
            .query_row([], |r| r.get(0))?,
        ..UnfinishedCounts::default()
    };
    for row in conn.prepare_cached("SELECT name, CAST(sum(count) AS BIGINT) AS count FROM unfinished_counts GROUP BY name")?.query([])? {
        let count = row.get("count")?;
        match row.get::<_, String>("name")?.as_str() {
            "abandoned" => counts.abandoned = count,
            "not_found" => counts.not_found = count,
            _ => {}
        }
    }
    Ok(counts)
}

/// The same figures counted over the tables, as the counts must always equal (what the tests
/// compare them with; never read by the screens: it reads every unfinished job).
pub fn unfinished_counted(conn: &dyn Db) -> sql::Result<UnfinishedCounts> {
    conn.query_row(
        "SELECT (SELECT count(*) FROM jobs WHERE rank < 3 AND abandoned_at IS NOT NULL) AS abandoned,
                (SELECT count(*) FROM jobs WHERE rank < 3 AND abandoned_at IS NULL AND poll_error_kind = 'not_found') AS not_found,
                (SELECT count(*) FROM outbox WHERE delivered_at IS NULL) AS pending",
        [],
        |r| {
            Ok(UnfinishedCounts {
                abandoned: r.get("abandoned")?,
                not_found: r.get("not_found")?,
                pending_notifications: r.get("pending")?,
            })
        },
    )
}
