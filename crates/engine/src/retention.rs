//! Retention: what is kept how long, so that the database stops growing on a steady load.
//!
//! After `delivery_retention_days`: deliveries, the timelines of finished jobs (reduced to their
//! first and terminal events), delivered notifications (except those whose key still guards
//! against a second alert) and events of no job. After `job_retention_days`: finished jobs with
//! nothing pending, deleted with their timeline, notifications, durations and emptied groups (what
//! outlives a job is in the counters, the daily completions and the per-state counts).
//!
//! Ages are on NeverMiss's clock (when it received or learned a thing, never a provider's time), and
//! everything is deleted in small batches, one store write each, so the writer is never held long.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::settings::Settings;
use crate::store::job::{now_ms, JobKey};
use crate::store::{deliveries, durations, groups, jobs, outbox, timeline, Store, StoreError};

/// How often the purge runs (and once at start).
pub const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// Rows deleted per write (deliveries, notifications).
pub const ROW_BATCH: i64 = 1000;
/// Jobs handled per write (trimming a timeline or archiving a job is a few statements each).
pub const JOB_BATCH: i64 = 200;
/// Event ids looked at per write by the sweep of events of no job.
pub const SWEEP_SPAN: i64 = 5000;

const DAY_MS: i64 = 86_400_000;

/// How long things are kept, in days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Deliveries, trimmed timelines, delivered notifications, events of no job.
    pub delivery_days: i64,
    /// Finished jobs (never fewer than `delivery_days`).
    pub job_days: i64,
}

impl Policy {
    pub fn from_settings(settings: &Settings) -> Policy {
        Policy { delivery_days: settings.delivery_retention_days(), job_days: settings.job_retention_days() }
    }
}

/// What one purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub deliveries: usize,
    /// Finished jobs whose timeline was reduced, and the events that removed.
    pub timelines_trimmed: usize,
    pub events_trimmed: usize,
    /// Events of no job.
    pub orphan_events: usize,
    pub notifications: usize,
    /// Finished jobs archived, and the events and notifications that went with them.
    pub jobs_archived: usize,
    pub archived_events: usize,
    pub archived_notifications: usize,
    /// Durations of jobs that ended before the jobs' retention (expected durations).
    pub durations: usize,
    /// Groups none of whose jobs is left.
    pub groups: usize,
}

/// Where the sweep of events of no job has got to (an event id): events only become orphans when
/// they are written (a job's own events go with it when it is archived), so the sweep never
/// needs to go back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sweep {
    from_id: i64,
}

/// Runs every purge once, as of `now` (ms), each in batches until nothing is left to do.
pub async fn purge(store: &Store, policy: Policy, now: i64, sweep: &mut Sweep) -> Result<Purged, StoreError> {
    let cutoff = now - policy.delivery_days * DAY_MS;
    let job_cutoff = now - policy.job_days.max(policy.delivery_days) * DAY_MS;
    let mut purged = Purged::default();

    loop {
        let n = store.write(move |tx| deliveries::purge_received_before(tx, cutoff, ROW_BATCH)).await?;
        purged.deliveries += n;
        if n == 0 {
            break;
        }
    }
    loop {
        let (jobs_done, events) = store
            .write(move |tx| {
                let due = jobs::untrimmed_finished_before(tx, cutoff, JOB_BATCH)?;
                let mut events = 0;
                for job in &due {
                    events += timeline::trim_to_first_and_terminal(tx, &JobKey::new(&job.provider, &job.job_id))?;
                    jobs::mark_timeline_trimmed(tx, job.id)?;
                }
                Ok((due.len(), events))
            })
            .await?;
        purged.timelines_trimmed += jobs_done;
        purged.events_trimmed += events;
        if jobs_done == 0 {
            break;
        }
    }
    loop {
        let from_id = sweep.from_id;
        let (n, next) = store.write(move |tx| timeline::purge_orphans_step(tx, cutoff, from_id, SWEEP_SPAN)).await?;
        purged.orphan_events += n;
        match next {
            Some(next) => sweep.from_id = next,
            None => break,
        }
    }
    loop {
        let n = store.write(move |tx| outbox::purge_delivered_before(tx, cutoff, ROW_BATCH)).await?;
        purged.notifications += n;
        if n == 0 {
            break;
        }
    }
    loop {
        let (archived, events, notifications) = store
            .write(move |tx| {
                let due = jobs::archivable_before(tx, job_cutoff, JOB_BATCH)?;
                let (mut archived, mut events, mut notifications) = (0, 0, 0);
                for job in &due {
                    events += timeline::delete_of_job(tx, &JobKey::new(&job.provider, &job.job_id))?;
                    notifications += outbox::delete_of_job(tx, &JobKey::new(&job.provider, &job.job_id))?;
                    archived += jobs::archive(tx, job)? as usize;
                }
                Ok((archived, events, notifications))
            })
            .await?;
        purged.jobs_archived += archived;
        purged.archived_events += events;
        purged.archived_notifications += notifications;
        if archived == 0 {
            break;
        }
    }
    // Both bounded (at most `durations::WINDOW` rows a kind, one row a group): one write each.
    purged.durations = store.write(move |tx| durations::purge_before(tx, job_cutoff)).await?;
    purged.groups = store.write(|tx| groups::purge_empty(tx)).await?;
    Ok(purged)
}

/// Purges at start and then every `PURGE_EVERY`, with the retention settings in force each time.
pub async fn run(store: Store, settings: Arc<Settings>, shutdown: CancellationToken) {
    let mut sweep = Sweep::default();
    loop {
        match purge(&store, Policy::from_settings(&settings), now_ms(), &mut sweep).await {
            Ok(purged) if purged != Purged::default() => tracing::info!(?purged, "retention: purged old rows"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention: cannot purge old rows; trying again later"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(PURGE_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge_point::{self, PushDelivery};
    use crate::store::deliveries::RawRequest;
    use crate::store::job::{JobEvent, JobState, Outcome, TimelineEvent};
    use crate::store::outbox::{Kind, Subject};
    use crate::store::{metrics, Tx};

    /// "Now" for the purge; every row is written as of some days before it.
    const NOW: i64 = 1_795_000_000_000;
    const POLICY: Policy = Policy { delivery_days: 7, job_days: 90 };

    fn ago(days: f64) -> i64 {
        NOW - (days * DAY_MS as f64) as i64
    }

    fn event(job_id: &str, state: JobState, seq: i64) -> JobEvent {
        JobEvent::new("generic", job_id, state, seq)
    }

    /// A signed push as the receiver hands it to the merge point, received at `at`.
    async fn push(store: &Store, delivery_id: &str, job_id: &str, state: JobState, seq: i64, at: i64) -> Outcome {
        let push = PushDelivery {
            delivery_id: delivery_id.into(),
            event: event(job_id, state, seq),
            raw: RawRequest { headers_json: "{}".into(), body: b"{}".to_vec(), body_truncated: false },
        };
        store.write(move |tx| merge_point::accept_push(tx, &push, at)).await.unwrap().outcome
    }

    /// Marks the rows of `job_id` (or of the tunnel subject) delivered at `at`, as the dispatcher does.
    async fn delivered(store: &Store, job_id: &str, at: i64) {
        let job_id = job_id.to_owned();
        store
            .write(move |tx: &mut Tx<'_>| {
                let ids: Vec<i64> = tx
                    .prepare_cached("SELECT id FROM outbox WHERE job_id = $1 AND delivered_at IS NULL")?
                    .query_map([&job_id], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                for id in ids {
                    outbox::mark_delivered(tx, id, at)?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }

    fn outcomes(timeline: &[TimelineEvent]) -> Vec<(Outcome, Option<JobState>)> {
        timeline.iter().map(|e| (e.outcome, e.state)).collect()
    }

    /// Old rows written with their real (old) timestamps through the merge point and the store's
    /// own functions, then one purge as of NOW with a 7-day retention and a 90-day job
    /// retention: what is removed and what is kept, table by table, and every metric the same
    /// before and after. A second purge finds nothing left to do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn old_rows_go_recent_and_pending_ones_stay_and_the_metrics_do_not_move() {
        use JobState::*;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("retention.db")).unwrap();

        // Finished 100 days ago, notified: archived.
        assert_eq!(push(&store, "old-1", "old", Queued, 1, ago(101.0)).await, Outcome::Applied);
        assert_eq!(push(&store, "old-2", "old", Running, 2, ago(100.9)).await, Outcome::Applied);
        assert_eq!(push(&store, "old-2", "old", Running, 2, ago(100.9)).await, Outcome::Duplicate);
        assert_eq!(push(&store, "old-3", "old", Succeeded, 3, ago(100.5)).await, Outcome::Applied);
        delivered(&store, "old", ago(100.4)).await;

        // Finished 100 days ago, its notification never delivered: kept (timeline trimmed).
        assert_eq!(push(&store, "pending-1", "pending", Running, 1, ago(100.2)).await, Outcome::Applied);
        assert_eq!(push(&store, "pending-2", "pending", Running, 2, ago(100.1)).await, Outcome::Applied);
        assert_eq!(push(&store, "pending-3", "pending", Failed, 3, ago(100.0)).await, Outcome::Applied);

        // Finished 29 days ago after duplicates and stale events, more of them after its end:
        // kept, its timeline reduced to its first and terminal events, its notification gone.
        assert_eq!(push(&store, "mid-1", "mid", Queued, 1, ago(30.0)).await, Outcome::Applied);
        assert_eq!(push(&store, "mid-3", "mid", Running, 3, ago(29.9)).await, Outcome::Applied);
        assert_eq!(push(&store, "mid-3", "mid", Running, 3, ago(29.9)).await, Outcome::Duplicate);
        assert_eq!(push(&store, "mid-2", "mid", Running, 2, ago(29.8)).await, Outcome::Stale);
        assert_eq!(push(&store, "mid-4", "mid", Running, 4, ago(29.7)).await, Outcome::Applied);
        assert_eq!(push(&store, "mid-5", "mid", Succeeded, 5, ago(29.0)).await, Outcome::Applied);
        assert_eq!(push(&store, "mid-5", "mid", Succeeded, 5, ago(28.95)).await, Outcome::Duplicate);
        assert_eq!(push(&store, "mid-6", "mid", Running, 6, ago(28.9)).await, Outcome::Stale);
        delivered(&store, "mid", ago(28.8)).await;

        // Finished a day and a half ago: untouched.
        assert_eq!(push(&store, "new-1", "new", Queued, 1, ago(2.0)).await, Outcome::Applied);
        assert_eq!(push(&store, "new-2", "new", Running, 2, ago(1.9)).await, Outcome::Applied);
        assert_eq!(push(&store, "new-2", "new", Running, 2, ago(1.9)).await, Outcome::Duplicate);
        assert_eq!(push(&store, "new-3", "new", Succeeded, 3, ago(1.5)).await, Outcome::Applied);
        delivered(&store, "new", ago(1.4)).await;

        // Running for 40 days, its stuck alert delivered 20 days ago: untouched (a purged stuck
        // row would let the next pass alert again).
        assert_eq!(push(&store, "run-1", "running", Queued, 1, ago(40.0)).await, Outcome::Applied);
        assert_eq!(push(&store, "run-2", "running", Running, 2, ago(39.0)).await, Outcome::Applied);
        assert_eq!(push(&store, "run-2", "running", Running, 2, ago(39.0)).await, Outcome::Duplicate);
        store.write(|tx| outbox::enqueue(tx, Kind::Stuck, &Subject::job("generic", "running"), Some(Running), ago(20.0))).await.unwrap();
        delivered(&store, "running", ago(20.0)).await;

        // Two tunnel-down periods alerted 30 and 20 days ago: the first is over (a later one was
        // alerted), the last may still go on.
        for (days, at) in [(30.0, ago(30.0)), (20.0, ago(20.0))] {
            let subject = Subject::Tunnel { tunnel: "bore".into(), down_since: at };
            store.write(move |tx| outbox::enqueue(tx, Kind::TunnelDown, &subject, None, at)).await.unwrap();
            let key = format!("bore@{}", crate::store::job::rfc3339(at));
            delivered(&store, &key, ago(days - 0.1)).await;
        }

        // Signed pushes refused before any job existed, 30 days and 1 day ago.
        for (job, at) in [("ghost-old", ago(30.0)), ("ghost-new", ago(1.0))] {
            store
                .write(move |tx| {
                    merge_point::record_rejected(
                        tx,
                        "generic",
                        Some(&format!("{job}-d")),
                        Some(job),
                        &RawRequest::default(),
                        "invalid payload",
                        at,
                    )
                })
                .await
                .unwrap();
        }

        let before = store.read(metrics::read).await.unwrap();
        let counts = |store: &Store| {
            store.read_blocking(|c| {
                Ok((
                    jobs::count(c)?,
                    timeline::count(c)?,
                    outbox::count(c)?,
                    c.query_row("SELECT count(*) FROM deliveries", [], |r| r.get::<_, i64>(0))?,
                ))
            })
        };
        assert_eq!(counts(&store).unwrap(), (5, 24, 7, 19), "jobs, events, outbox rows, deliveries written");

        let mut sweep = Sweep::default();
        let purged = purge(&store, POLICY, NOW, &mut sweep).await.unwrap();

        let timeline_of = |job: &'static str| store.read_blocking(move |c| timeline::of_job(c, &JobKey::new("generic", job))).unwrap();
        let job = |job: &'static str| store.read_blocking(move |c| jobs::job(c, &JobKey::new("generic", job))).unwrap();

        // Archived: the job, its timeline, its notification.
        assert!(job("old").is_none(), "a job finished 100 days ago is archived");
        assert!(timeline_of("old").is_empty());
        // Kept while its notification is pending, timeline trimmed.
        assert_eq!(job("pending").unwrap().state, Failed);
        assert_eq!(outcomes(&timeline_of("pending")), vec![(Outcome::Applied, Some(Running)), (Outcome::Applied, Some(Failed))]);
        // Trimmed to the first and the terminal event.
        assert_eq!(job("mid").unwrap().state, Succeeded);
        assert_eq!(outcomes(&timeline_of("mid")), vec![(Outcome::Applied, Some(Queued)), (Outcome::Applied, Some(Succeeded))]);
        assert_eq!(timeline_of("mid")[1].delivery_id.as_deref(), Some("mid-5"), "the terminal event is the one kept");
        // Untouched.
        assert_eq!(timeline_of("new").len(), 4);
        assert_eq!(timeline_of("running").len(), 3);
        assert_eq!(timeline_of("ghost-old").len(), 0, "a refused push of no job, 30 days old");
        assert_eq!(timeline_of("ghost-new").len(), 1);
        let outbox_left: Vec<(String, String)> = store
            .read_blocking(|c| {
                c.prepare_cached("SELECT kind, job_id FROM outbox ORDER BY id")?
                    .query_map([], |r| Ok((r.get("kind")?, r.get("job_id")?)))?
                    .collect()
            })
            .unwrap();
        let outbox_left: Vec<(&str, &str)> = outbox_left.iter().map(|(k, j)| (k.as_str(), j.as_str())).collect();
        assert_eq!(
            outbox_left,
            vec![
                ("terminal", "pending"),
                ("terminal", "new"),
                ("stuck", "running"),
                ("tunnel_down", format!("bore@{}", crate::store::job::rfc3339(ago(20.0))).as_str()),
            ]
        );
        assert_eq!(
            purged,
            Purged {
                deliveries: 15,
                timelines_trimmed: 3,
                events_trimmed: 2 + 1 + 6,
                orphan_events: 1,
                // old's and mid's terminal rows, the first tunnel-down period's row
                notifications: 3,
                jobs_archived: 1,
                archived_events: 2,
                archived_notifications: 0,
                durations: 0,
                groups: 0,
            }
        );
        assert_eq!(counts(&store).unwrap(), (4, 2 + 2 + 4 + 3 + 1, 4, 3 + 1));

        // Counters, completions per day, jobs per state, pending notifications: all the same.
        let after = store.read(metrics::read).await.unwrap();
        assert_eq!(after, before);
        assert_eq!(after.jobs_by_state["succeeded"], 3, "the archived job still counts in its final state");

        assert_eq!(purge(&store, POLICY, NOW, &mut sweep).await.unwrap(), Purged::default(), "nothing left to do");
        assert_eq!(store.read(metrics::read).await.unwrap(), before);

        // A refused push's event, recorded while its job did not exist, is in that job's timeline
        // once the job is created (events name their job's row from then on).
        assert_eq!(push(&store, "ghost-new-2", "ghost-new", Running, 1, NOW).await, Outcome::Applied);
        assert_eq!(outcomes(&timeline_of("ghost-new")), vec![(Outcome::Rejected, None), (Outcome::Applied, Some(Running))]);
    }

    /// A finished job's result and provider page leave with the job when it is archived.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_archived_job_takes_its_result_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("results.db")).unwrap();
        let event = JobEvent {
            result: Some(crate::store::job::JobResult { text: Some("what it made".into()), urls: vec![], image: None }),
            provider_url: Some("https://replicate.com/p/old".into()),
            ..event("old", JobState::Succeeded, 1)
        };
        let push = PushDelivery {
            delivery_id: "old-1".into(),
            event,
            raw: RawRequest { headers_json: "{}".into(), body: b"{}".to_vec(), body_truncated: false },
        };
        store.write(move |tx| merge_point::accept_push(tx, &push, ago(100.0))).await.unwrap();
        delivered(&store, "old", ago(99.9)).await;
        let kept = || async {
            store
                .read(|db| {
                    db.query_row("SELECT count(*) FROM jobs WHERE result IS NOT NULL OR provider_url IS NOT NULL", [], |r| {
                        r.get::<_, i64>(0)
                    })
                })
                .await
                .unwrap()
        };
        assert_eq!(kept().await, 1);
        let purged = purge(&store, POLICY, NOW, &mut Sweep::default()).await.unwrap();
        assert_eq!(purged.jobs_archived, 1, "{purged:?}");
        assert_eq!(kept().await, 0, "the result left with the job");
    }
}
