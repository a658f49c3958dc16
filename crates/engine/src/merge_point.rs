//! The one merge point: every observation of a job, pushed or pulled, goes through `merge`.
//!
//! The guard lives in the SQL write itself (`INSERT ... ON CONFLICT DO UPDATE ... WHERE`, see
//! `store::guard`, where PostgreSQL's statement stands beside SQLite's): a job only moves forward
//! (rank first, then `seq` within the same non-terminal rank) and terminal states are sinks. In the same transaction the first arrival at a terminal state enqueues exactly
//! one outbox row (unique key on the job) and the timeline records the event with its outcome.
//!
//! All functions here but `push` run inside the store's writer transaction (see
//! `store::Store::write`); `push` commits a push on its own (one call on PostgreSQL).

use crate::store::counters::Counter;
use crate::store::job::{now_ms, Job, JobEvent, JobKey, Outcome, Source, TERMINAL_RANK};
use crate::store::jobs::job_from_row;
use crate::store::outbox::{Kind, Subject};
use crate::store::push::PushCall;
use crate::store::refused::{self, NewRefusal, RefusalKind};
use crate::store::sql::{self, params, Dialect, OptionalExtension};
use crate::store::{deliveries, groups, guard, jobs, outbox, timeline, Store, StoreError, Tx};

use crate::store::deliveries::RawRequest;

/// What a merge did (`merge`, and each way in: a push, a poll, a discovered job).
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// `Applied` or `Stale` (`Duplicate` for a push whose delivery was seen before).
    pub outcome: Outcome,
    /// This event moved the job into a terminal state (this happens once per job).
    pub first_terminal: bool,
    /// The job as the write left it, when it changed (applied, or `described`).
    pub job: Option<Job>,
    /// A stale event said what the job produced, or its provider page, where it was not known
    /// (`jobs::describe_if_undescribed`): the job changed without moving.
    pub described: bool,
}

impl Merged {
    /// Whether the job changed: it moved, or a stale event described it.
    pub fn changed(&self) -> bool {
        self.outcome == Outcome::Applied || self.described
    }
}

/// A signed delivery whose payload parsed: its dedupe key, its event and the raw request.
#[derive(Debug, Clone)]
pub struct PushDelivery {
    pub delivery_id: String,
    pub event: JobEvent,
    pub raw: RawRequest,
}

/// The guarded upsert. Creates an unknown job, adopts a forward event, refuses everything else.
/// The caller records the event on the timeline in the same transaction (see `accept_push`).
#[tracing::instrument(name = "merge", level = "debug", skip_all, fields(provider = %ev.provider, job_id = %ev.job_id, state = ev.state.as_str(), seq = ev.seq, source = source.as_str(), outcome = tracing::field::Empty))]
pub fn merge(tx: &mut Tx<'_>, ev: &JobEvent, source: Source, now: i64) -> sql::Result<Merged> {
    let rank = ev.state.rank();
    let (provider, job_id, label, state, seq, error, detail, finished_at, started_at, source) = (
        &ev.provider,
        &ev.job_id,
        &ev.label,
        ev.state.as_str(),
        ev.seq,
        &ev.error,
        &ev.detail,
        ev.finished_at,
        ev.started_at,
        source.as_str(),
    );
    let (result, provider_url) = (ev.result.as_ref().filter(|r| !r.is_empty()).map(|r| r.to_column()), &ev.provider_url);
    let upsert = match tx.dialect() {
        Dialect::Sqlite => guard::SQLITE_UPSERT,
        Dialect::Postgres => guard::POSTGRES_UPSERT,
    };
    // Both statements number their parameters the same way (see `guard`).
    let adopted: Option<(i64, Job)> = tx
        .query_row(
            upsert,
            params![
                provider,
                job_id,
                label,
                state,
                rank,
                seq,
                error,
                detail,
                now,
                finished_at,
                source,
                TERMINAL_RANK,
                started_at,
                result,
                provider_url,
                ev.kind
            ],
            // The job's columns and its rank (`guard`'s RETURNING), by name.
            |row| Ok((row.get("rank")?, job_from_row(row)?)),
        )
        .optional()?;

    let outcome = if adopted.is_some() { Outcome::Applied } else { Outcome::Stale };
    let first_terminal = adopted.as_ref().map(|(rank, _)| *rank) == Some(TERMINAL_RANK);
    let mut adopted = adopted.map(|(_, job)| job);
    tracing::Span::current().record("outcome", outcome.as_str());
    tracing::debug!(first_terminal, "merged");
    // The group the sender names, for a job in none yet (a job stays in its first group).
    if let Some(group) = ev.group.as_deref() {
        if groups::join(tx, &ev.key(), group)? {
            if let Some(job) = adopted.as_mut() {
                job.group = Some(group.to_owned());
            }
        }
    }
    let mut described = false;
    if first_terminal {
        let group = adopted.as_ref().and_then(|job| job.group.clone());
        let announced_alone = match group {
            None => true,
            Some(_) => groups::MemberNotifications::of(tx)?.announces(ev.state),
        };
        if announced_alone {
            outbox::enqueue(tx, Kind::Terminal, &Subject::job(&ev.provider, &ev.job_id), Some(ev.state), now)?;
        }
        if let Some(group) = group {
            groups::member_ended(tx, &group, now)?;
        }
    } else if outcome == Outcome::Stale {
        if let Some(label) = ev.label.as_deref() {
            jobs::name_if_unnamed(tx, &ev.key(), label)?;
        }
        if let Some(kind) = ev.kind.as_deref() {
            jobs::kind_if_unknown(tx, &ev.key(), kind, ev.started_at)?;
        }
        if let Some(started_at) = ev.started_at {
            jobs::note_started_at(tx, &ev.key(), started_at)?;
        }
        described = jobs::describe_if_undescribed(tx, &ev.key(), result.as_deref(), ev.provider_url.as_deref())?;
    }
    Ok(Merged { outcome, first_terminal, job: adopted, described })
}

/// A push: dedupe on (provider, delivery id) durably, then merge.
pub fn accept_push(tx: &mut Tx<'_>, push: &PushDelivery, now: i64) -> sql::Result<Merged> {
    let ev = &push.event;
    tx.count(Counter::DeliveriesTotal, 1);
    let first_seen = tracing::debug_span!("dedupe", delivery_id = %push.delivery_id)
        .in_scope(|| deliveries::insert_accepted(tx, &ev.provider, &push.delivery_id, &ev.job_id, &push.raw, now))?;
    tracing::debug!(first_seen, "deduped");
    if !first_seen {
        tx.count(Counter::Duplicates, 1);
        timeline::record(tx, ev, Source::Push, Some(&push.delivery_id), Outcome::Duplicate, None, now)?;
        return Ok(Merged { outcome: Outcome::Duplicate, first_terminal: false, job: None, described: false });
    }
    let merged = merge(tx, ev, Source::Push, now)?;
    tx.count(Counter::from(merged.outcome), 1);
    timeline::record(tx, ev, Source::Push, Some(&push.delivery_id), merged.outcome, event_detail(ev), now)?;
    // Only a change is published; a duplicate or a stale event leaves the job as it was.
    let job = match merged.job {
        None if merged.described => jobs::job(tx, &ev.key())?,
        job => job,
    };
    Ok(Merged { outcome: merged.outcome, first_terminal: merged.first_terminal, job, described: merged.described })
}

/// A push, durably committed: `accept_push` in the writer's group on SQLite; on PostgreSQL the
/// same path in the server-side `nevermiss_push_group`, with the other deliveries waiting in one
/// call and one transaction (natively async: `store::push`). The debug log tells the same story on both (deduped, merged, enqueued).
pub async fn push(store: &Store, push: PushDelivery) -> Result<Merged, StoreError> {
    if store.dialect() == Dialect::Sqlite {
        return store.write(move |tx| accept_push(tx, &push, now_ms())).await;
    }
    let ev = &push.event;
    let call = PushCall { delivery_id: &push.delivery_id, event: ev, raw: &push.raw, event_detail: event_detail(ev), now: now_ms() };
    let pushed = store.push_in_one_call(call).await?;
    let first_seen = pushed.outcome != Outcome::Duplicate;
    tracing::debug_span!("dedupe", delivery_id = %push.delivery_id).in_scope(|| tracing::debug!(first_seen, "deduped"));
    if first_seen {
        let merge = tracing::debug_span!("merge", provider = %ev.provider, job_id = %ev.job_id, state = ev.state.as_str(), seq = ev.seq,
            source = Source::Push.as_str(), outcome = pushed.outcome.as_str());
        merge.in_scope(|| {
            tracing::debug!(first_terminal = pushed.first_terminal, "merged");
            if pushed.first_terminal {
                tracing::debug_span!("enqueue", kind = Kind::Terminal.as_str(), added = pushed.channels.len())
                    .in_scope(|| tracing::debug!(channels = ?pushed.channels, "enqueued"));
            }
        });
    }
    Ok(Merged { outcome: pushed.outcome, first_terminal: pushed.first_terminal, job: pushed.job, described: pushed.described })
}

/// The unfinished jobs whose id starts with `prefix` end with `ev`'s job, in its state (a deleted
/// session's open run: `Provider::ends_with_it`), merged as part of the same push. Returns what
/// each merge did.
pub fn end_with(tx: &mut Tx<'_>, ev: &JobEvent, prefix: &str, delivery_id: &str, now: i64) -> sql::Result<Vec<Merged>> {
    let ids: Vec<String> = jobs::unfinished_since_before(tx, &ev.provider, i64::MAX)?
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| id.starts_with(prefix))
        .collect();
    let mut merged = Vec::with_capacity(ids.len());
    for id in ids {
        let with = JobEvent {
            job_id: id,
            label: None,
            // What the ending event produced is its own job's, not these runs'.
            result: None,
            detail: Some(format!("ended with {}: {}", ev.job_id, event_detail(ev).unwrap_or(ev.state.as_str()))),
            ..ev.clone()
        };
        let result = merge(tx, &with, Source::Push, now)?;
        timeline::record(tx, &with, Source::Push, Some(delivery_id), result.outcome, event_detail(&with), now)?;
        merged.push(result);
    }
    Ok(merged)
}

/// A poll answer from reconciliation. Only adopted polls enter the timeline: a job polled every
/// minute for hours would otherwise bury its deliveries under identical "stale" rows.
/// `webhook_expected` (`Provider::webhook_expected`): a job's end first learned here is then a
/// reconcile rescue (contract: a webhook went missing), else a completion by polling.
pub fn accept_poll(tx: &mut Tx<'_>, ev: &JobEvent, webhook_expected: bool, now: i64) -> sql::Result<Merged> {
    let merged = merge(tx, ev, Source::Pull, now)?;
    if merged.first_terminal {
        tx.count(if webhook_expected { Counter::ReconcileRescues } else { Counter::PollOnlyCompletions }, 1);
    }
    if merged.outcome == Outcome::Applied {
        timeline::record(tx, ev, Source::Pull, None, merged.outcome, event_detail(ev), now)?;
    }
    jobs::poll_succeeded(tx, &ev.key(), now)?;
    // Read after the poll's bookkeeping, so what is published says when it was checked.
    let job = if merged.changed() { jobs::job(tx, &ev.key())? } else { None };
    Ok(Merged { job, ..merged })
}

/// A signed request whose payload could not be used: kept whole as a rejected delivery, so
/// nothing is lost, once per delivery id, and noted on the job's timeline when the job id could
/// be read. Answers `Rejected`, or `Duplicate` for a resend of a delivery already kept (counted
/// as a duplicate; no second row, no second timeline entry).
pub fn record_rejected(
    tx: &mut Tx<'_>,
    provider: &str,
    delivery_id: Option<&str>,
    job_id: Option<&str>,
    raw: &RawRequest,
    reason: &str,
    now: i64,
) -> sql::Result<Outcome> {
    tx.count(Counter::DeliveriesTotal, 1);
    let rejected = deliveries::NewRejected { provider, delivery_id, job_id, raw, reason };
    if !deliveries::insert_rejected(tx, &rejected, now)? {
        tx.count(Counter::Duplicates, 1);
        return Ok(Outcome::Duplicate);
    }
    tx.count(Counter::Rejected, 1);
    if let Some(job_id) = job_id {
        timeline::record_rejected(tx, &JobKey::new(provider, job_id), delivery_id, reason, now)?;
    }
    Ok(Outcome::Rejected)
}

/// A verified event of a kind NeverMiss does not act on: counted, and noted on the timeline of
/// the job it names when that job is known. Nothing else is stored (the sender's request is
/// fine; there is nothing to keep it for).
pub fn record_ignored(
    tx: &mut Tx<'_>,
    provider: &str,
    delivery_id: Option<&str>,
    job_id: Option<&str>,
    reason: &str,
    now: i64,
) -> sql::Result<()> {
    tx.count(Counter::DeliveriesTotal, 1);
    tx.count(Counter::Ignored, 1);
    if let Some(job_id) = job_id {
        timeline::record_ignored(tx, &JobKey::new(provider, job_id), delivery_id, reason, now)?;
    }
    Ok(())
}

/// A request with a missing or wrong signature: counted, nothing else stored.
pub fn count_bad_signature(tx: &mut Tx<'_>) -> sql::Result<()> {
    tx.count(Counter::DeliveriesTotal, 1);
    tx.count(Counter::BadSignatures, 1);
    Ok(())
}

/// A request refused before it was parsed: counted by why (a bad signature, or a provider not
/// configured), and kept among the last refused requests (`refused::KEPT`, trimmed in this
/// same write). Its job is never touched: nothing in it is trusted.
pub fn record_refused(tx: &mut Tx<'_>, refusal: &NewRefusal, now: i64) -> sql::Result<()> {
    match refusal.kind {
        RefusalKind::MissingHeader | RefusalKind::BadSignature | RefusalKind::Expired | RefusalKind::ForeignAccount => {
            count_bad_signature(tx)?
        }
        RefusalKind::NotConfigured | RefusalKind::BadSecret => tx.count(Counter::UnconfiguredDeliveries, 1),
        RefusalKind::UnknownProvider | RefusalKind::Unverifiable => {}
    }
    refused::insert(tx, refusal, now)
}

/// Starts watching a job. Returns whether it was new; a label given for a known job replaces its
/// label; a group puts it in that group unless it is in one. The job's state is left alone: only
/// events move it.
/// `poll_url` is where to poll when the provider's API cannot be derived from the id.
pub fn track(
    tx: &mut Tx<'_>,
    key: &JobKey,
    label: Option<&str>,
    poll_url: Option<&str>,
    group: Option<&str>,
    now: i64,
) -> sql::Result<(bool, Option<Job>)> {
    let created = jobs::track(tx, key, label, poll_url, now)?;
    if let Some(group) = group {
        groups::join(tx, key, group)?;
    }
    Ok((created, jobs::job(tx, key)?))
}

fn event_detail(ev: &JobEvent) -> Option<&str> {
    ev.error.as_deref().or(ev.detail.as_deref())
}
