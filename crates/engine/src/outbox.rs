//! The outbox dispatcher: delivers the side effects the merge point enqueued (one row per job and
//! kind) through each channel's sender (`Channels`), marks them delivered, and retries failures with backoff. Exactly once
//! in the record, at least once in delivery, and shown once in the user's eyes:
//!
//! - each row is marked delivered right after it is shown, before the next one is shown, so a
//!   crash repeats at most one notification at the next start;
//! - a row shown but not yet marked is kept in memory (`Outbox::settled`) until its mark is
//!   committed: when the store fails, only the marking is retried (with backoff), never the
//!   showing, and nothing new is shown until the mark is on disk;
//! - each notification carries its outbox row's id (`Notification::outbox_id`, `tag`), so a repeat
//!   after a crash replaces the first on a server that honours a tag (see
//!   `channels::desktop::DesktopNotifier`);
//! - a channel's backoff is the channel's: when a send fails because of the channel (no
//!   connection, a 5xx, a 429: `Fault::Channel`), the channel is in an outage
//!   (`store::channels::outage`, in the database, so it survives a restart and a fleet shares
//!   it) and every pending row of it, those already waiting and those enqueued meanwhile, waits
//!   for the channel's next attempt; that attempt is one send (a summary when more than the
//!   channel's `summary_after` wait, else the first row), and when it goes through, what waited
//!   is one backlog. A message the channel answered and refused (`Fault::Message`, a 4xx) is
//!   retried on its own backoff without holding the others;
//! - nothing is shown until the host opens the gate (`Outbox::open_gate`): the desktop shell does
//!   so once a click on a notification can open its window, so that rows left pending by the last
//!   run are clickable too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::changes::Changes;
use crate::notification::{Message, Summary};
use crate::store::channels::{ChannelRow, Outage};
use crate::store::counters::ChannelTally;
use crate::store::job::now_ms;
use crate::store::{self, jobs, Store};

use crate::channels::senders::Channels;
use crate::notification::{Fault, NotifyError, Pending};
use crate::store::outbox::{Kind, Subject};

/// Rows read per batch; each is shown and marked before the next.
const BATCH: i64 = 100;

/// How long a claimed row is this process's to deliver (another process of a fleet takes it
/// after that: this one died).
const CLAIM: Duration = Duration::from_secs(60);

/// Delay before the next attempt after `attempts` failures: `unit` doubling from twice the unit
/// (2 s with the default 1 s), at most 10 minutes.
pub fn backoff(attempts: i64, unit: Duration) -> Duration {
    unit.saturating_mul(2u32.saturating_pow(attempts.clamp(1, 20) as u32)).min(Duration::from_secs(600))
}

/// The default unit of `backoff`.
pub const RETRY_UNIT: Duration = Duration::from_secs(1);

/// Delay before retrying the store after `failures` failures in a row (a read of the due rows or
/// the mark of a shown one): 100 ms doubling, at most 30 s.
fn store_backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << failures.clamp(1, 10).saturating_sub(1)).min(30_000))
}

/// What became of one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Delivered,
    /// The channel refused this message; its other rows go on.
    Refused,
    /// The channel failed: its rows wait for its next attempt.
    ChannelFailed,
}

/// A row settled in memory (sent, covered by a sent summary, or not to be sent: its channel is
/// off) whose mark is not committed yet.
#[derive(Debug, Clone)]
struct Settled {
    channel: String,
    kind: Kind,
    subject: Subject,
    /// Sent (the channel's last success moves), rather than settled without sending.
    sent: bool,
}

/// The local minute of the day now (quiet hours are the user's wall-clock hours).
pub(crate) fn local_minute_now() -> i64 {
    use chrono::Timelike;
    let now = chrono::Local::now();
    i64::from(now.hour()) * 60 + i64::from(now.minute())
}

pub struct Outbox {
    store: Store,
    channels: Arc<Channels>,
    changes: Arc<Changes>,
    wake: Notify,
    /// Rows sent (or settled without sending) whose mark is not committed yet: never sent
    /// again while they are here; removed once their mark is on disk.
    settled: Mutex<BTreeMap<i64, Settled>>,
    /// True once notifications may be sent (`open_gate`).
    gate: watch::Sender<bool>,
    /// The unit of the retry backoff (`RETRY_UNIT`; shorter in tests).
    retry_unit: Duration,
}

impl Outbox {
    /// A dispatcher; `gated` holds every notification until `open_gate` (the desktop shell's
    /// readiness), otherwise they go out from the start.
    pub fn new(store: Store, channels: Arc<Channels>, changes: Arc<Changes>, gated: bool, retry_unit: Duration) -> Arc<Outbox> {
        Arc::new(Outbox {
            store,
            channels,
            changes,
            wake: Notify::new(),
            settled: Mutex::new(BTreeMap::new()),
            gate: watch::Sender::new(!gated),
            retry_unit,
        })
    }

    /// The senders of every channel.
    pub fn channels(&self) -> &Arc<Channels> {
        &self.channels
    }

    /// Something was enqueued: deliver it now rather than at the next sweep.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Lets notifications be shown: the host is ready for them (the desktop shell calls it once
    /// a click on a notification can open its window). Idempotent.
    pub fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    /// Delivers pending rows until `shutdown`, starting (once the gate is open) with whatever a
    /// previous run left.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut gate = self.gate.subscribe();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = gate.wait_for(|open| *open) => {}
        }
        let mut failures = 0u32;
        loop {
            match self.deliver_due().await {
                Ok(next_due) => {
                    failures = 0;
                    let sleep = next_due.unwrap_or(Duration::from_secs(60));
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(sleep) => {}
                    }
                }
                Err(e) => {
                    failures += 1;
                    let delay = store_backoff(failures);
                    let owed = self.settled.lock().unwrap().len();
                    tracing::warn!(error = %e, failures, retry_in = ?delay, marks_owed = owed, "outbox: the store failed; retrying (shown notifications are not shown again)");
                    // Only the timer: a wake (something enqueued) must not hurry a retry against a
                    // failing store. The wake is kept and served after.
                    tokio::select! {
                        _ = shutdown.cancelled() => {
                            // One last try, so that a clean stop does not repeat what was shown.
                            if let Err(e) = self.mark_settled().await {
                                tracing::warn!(error = %e, marks_owed = owed, "outbox: stopping with marks owed; those notifications will be shown again at the next start");
                            }
                            return;
                        }
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    /// Delivers every due row; returns how long until the next one is due, if any is pending.
    /// Marks owed from an earlier failure come first: nothing new is sent while a sent row is
    /// unmarked, so a crash repeats at most one notification per channel.
    async fn deliver_due(&self) -> Result<Option<Duration>, crate::store::StoreError> {
        self.mark_settled().await?;
        loop {
            let now = now_ms();
            let node = self.store.node().to_owned();
            let claim_until = now + CLAIM.as_millis() as i64;
            let due = self.store.write(move |tx| store::outbox::claim(tx, &node, now, claim_until, BATCH)).await?;
            // A batch not full took every row due: the pass ends after it rather than with a claim
            // that finds nothing (a write the deliveries' groups carry); what was enqueued
            // meanwhile woke the next pass, and `next_due_at` below finds what came due.
            let last = due.len() < BATCH as usize;
            let mut due: Vec<Pending> = {
                let settled = self.settled.lock().unwrap();
                due.into_iter().filter(|row| !settled.contains_key(&row.id)).map(|row| Pending::from_due(row, now)).collect()
            };
            // What "usually" is for each job's kind (a slower-than-usual alert says it).
            for pending in &mut due {
                let n = &mut pending.notification;
                n.expected_ms = n.job_kind.as_deref().and_then(|kind| self.changes.expected().of(kind)).map(|e| e.usual_ms);
            }
            if due.is_empty() {
                break;
            }
            let channels = self.store.read(store::channels::all).await?;
            self.channels.add_jobs(&self.store, &mut due, &channels).await?;
            if due.iter().any(|p| p.notification.kind == store::outbox::Kind::GroupEnd) {
                let mut notifications: Vec<_> = due.iter().map(|p| p.notification.clone()).collect();
                notifications =
                    self.store.read(move |db| crate::notification::add_groups(db, &mut notifications).map(|()| notifications)).await?;
                for (pending, notification) in due.iter_mut().zip(notifications) {
                    pending.notification = notification;
                }
                // A group's end a job joined since: settled unsent (that job's end announces again).
                let (overtaken, rest): (Vec<Pending>, Vec<Pending>) = due.into_iter().partition(|p| p.notification.overtaken());
                due = rest;
                let mut settled = self.settled.lock().unwrap();
                for row in overtaken {
                    tracing::debug!(subject = ?row.notification.subject, "a group's end overtaken by a job that joined it: not sent");
                    let Pending { id, channel, notification, .. } = row;
                    settled.insert(id, Settled { channel, kind: notification.kind, subject: notification.subject, sent: false });
                }
            }
            // Each channel's rows, in the order they came due.
            let mut by_channel: Vec<(String, Vec<Pending>)> = Vec::new();
            for pending in due {
                match by_channel.iter_mut().find(|(name, _)| *name == pending.channel) {
                    Some((_, rows)) => rows.push(pending),
                    None => by_channel.push((pending.channel.clone(), vec![pending])),
                }
            }
            // The channels at once: a slow or failing one (an SMTP server that times out) does
            // not hold up the others. Within a channel, each row is marked before the next.
            let mut sending = Vec::new();
            for (name, rows) in by_channel {
                match channels.iter().find(|c| c.name == name) {
                    Some(channel) if channel.enabled => sending.push(self.deliver_to(channel, rows)),
                    // Turned off (or gone) since they were enqueued: settled without sending.
                    _ => {
                        let mut settled = self.settled.lock().unwrap();
                        for row in rows {
                            settled.insert(
                                row.id,
                                Settled {
                                    channel: name.clone(),
                                    kind: row.notification.kind,
                                    subject: row.notification.subject,
                                    sent: false,
                                },
                            );
                        }
                    }
                }
            }
            for sent in futures_util::future::join_all(sending).await {
                sent?;
            }
            self.mark_settled().await?;
            if last {
                break;
            }
        }
        let next = self.store.read(store::outbox::next_due_at).await?;
        Ok(next.map(|at| Duration::from_millis((at - now_ms()).max(0) as u64)))
    }

    /// Delivers one channel's due rows: those its quiet hours hold wait until they end; more than
    /// its `summary_after` at once go as one summary; the others one by one, until the channel
    /// fails (then the rest wait with the failed one for the channel's next attempt).
    async fn deliver_to(&self, channel: &ChannelRow, rows: Vec<Pending>) -> Result<(), crate::store::StoreError> {
        let minute = local_minute_now();
        let (held, rows): (Vec<Pending>, Vec<Pending>) =
            rows.into_iter().partition(|row| channel.quiet.is_some_and(|q| q.holds(minute, row.notification.is_urgent())));
        if let (false, Some(quiet)) = (held.is_empty(), channel.quiet) {
            let until = now_ms() + quiet.minutes_left(minute) * 60_000;
            let ids: Vec<i64> = held.iter().map(|row| row.id).collect();
            tracing::debug!(channel = %channel.name, held = ids.len(), "quiet hours: held until they end");
            self.store.write(move |tx| store::outbox::defer(tx, &ids, until)).await?;
        }
        let mut outage = channel.outage;
        if channel.summarizes(rows.len()) {
            return self.deliver_summary(channel, &mut outage, rows).await.map(|_| ());
        }
        let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
        for (i, row) in rows.into_iter().enumerate() {
            if self.deliver_one(channel, &mut outage, row, &ids[i + 1..]).await? == Sent::ChannelFailed {
                break;
            }
        }
        Ok(())
    }

    /// Sends one row; on success it is settled and marked at once, before the next is sent. When
    /// the channel fails, `waiting` (the channel's rows after it) wait with it for its next attempt.
    async fn deliver_one(
        &self,
        channel: &ChannelRow,
        outage: &mut Option<Outage>,
        Pending { id, notification, attempts, .. }: Pending,
        waiting: &[i64],
    ) -> Result<Sent, crate::store::StoreError> {
        let span = tracing::debug_span!("deliver", channel = %channel.name, identity = %notification.identity(), outbox_id = id, attempts);
        let sent = self.channels.send(channel, &Message::One(&notification)).instrument(span.clone()).await;
        span.in_scope(|| tracing::debug!(ok = sent.is_ok(), "delivered"));
        match sent {
            Ok(_) => {
                // Sent: from here on it is never sent again by this process, whatever the store does.
                let settled =
                    Settled { channel: channel.name.clone(), kind: notification.kind, subject: notification.subject.clone(), sent: true };
                self.settled.lock().unwrap().insert(id, settled);
                *outage = None;
                self.mark_settled().instrument(span).await.map(|()| Sent::Delivered)
            }
            Err(e) => self.attempt_failed(channel, outage, &[(id, attempts)], waiting, e).await,
        }
    }

    /// Sends one summary for every row; on success every row it covers is settled and marked.
    async fn deliver_summary(
        &self,
        channel: &ChannelRow,
        outage: &mut Option<Outage>,
        rows: Vec<Pending>,
    ) -> Result<Sent, crate::store::StoreError> {
        let attempts: Vec<(i64, i64)> = rows.iter().map(|row| (row.id, row.attempts)).collect();
        let summary = Summary::new(rows.into_iter().map(|row| row.notification).collect());
        let span = tracing::debug_span!("deliver_summary", channel = %channel.name, covered = summary.count, outbox_id = summary.outbox_id);
        let sent = self.channels.send(channel, &Message::Summary(&summary)).instrument(span.clone()).await;
        match sent {
            Ok(_) => {
                {
                    let mut settled = self.settled.lock().unwrap();
                    for n in &summary.notifications {
                        settled.insert(
                            n.outbox_id,
                            Settled { channel: channel.name.clone(), kind: n.kind, subject: n.subject.clone(), sent: true },
                        );
                    }
                }
                *outage = None;
                self.mark_settled().instrument(span).await.map(|()| Sent::Delivered)
            }
            Err(e) => self.attempt_failed(channel, outage, &attempts, &[], e).await,
        }
    }

    /// A send of `rows` failed; the channel's failure is counted and its last error kept. When the
    /// message was refused (`Fault::Message`), each of its rows is retried after its own backoff
    /// and the channel goes on (it answered: its outage, if any, is over). When the channel
    /// failed (`Fault::Channel`), its outage goes on one more attempt: the rows sent and
    /// `waiting` (claimed, not sent) wait for its next attempt, with every other pending row of it.
    async fn attempt_failed(
        &self,
        channel: &ChannelRow,
        outage: &mut Option<Outage>,
        rows: &[(i64, i64)],
        waiting: &[i64],
        NotifyError(reason, fault): NotifyError,
    ) -> Result<Sent, crate::store::StoreError> {
        let name = channel.name.clone();
        let rows: Vec<(i64, i64)> = rows.iter().map(|&(id, attempts)| (id, attempts + 1)).collect();
        let unit = self.retry_unit;
        let now = now_ms();
        let sent = match fault {
            Fault::Message => {
                let first = rows.first().map(|r| r.1).unwrap_or(1);
                tracing::warn!(channel = %name, rows = rows.len(), attempts = first, retry_in = ?backoff(first, unit), error = %reason, "the channel refused a notification; it is retried on its own, the channel's others go on");
                let was_out = outage.take().is_some();
                self.store
                    .write(move |tx| {
                        for &(id, attempts) in &rows {
                            store::outbox::attempt_failed(tx, id, attempts, now + backoff(attempts, unit).as_millis() as i64, &reason)?;
                        }
                        if was_out {
                            store::channels::outage_over(tx, &name)?;
                        }
                        store::channels::send_failed(tx, &name, &reason, now)
                    })
                    .await?;
                Sent::Refused
            }
            Fault::Channel => {
                let attempts = outage.map_or(1, |o| o.attempts + 1);
                let retry_in = backoff(attempts, unit);
                let next = Outage { attempts, retry_at: now + retry_in.as_millis() as i64 };
                *outage = Some(next);
                tracing::warn!(channel = %name, attempts, retry_in = ?retry_in, waiting = rows.len() + waiting.len(), error = %reason, "channel failing: its notifications wait together for its next attempt");
                let waiting = waiting.to_vec();
                self.store
                    .write(move |tx| {
                        for &(id, attempts) in &rows {
                            store::outbox::attempt_failed(tx, id, attempts, next.retry_at, &reason)?;
                        }
                        store::outbox::wait_for_channel(tx, &waiting, next.retry_at, &reason)?;
                        store::channels::outage(tx, &name, next)?;
                        store::channels::send_failed(tx, &name, &reason, now)
                    })
                    .await?;
                Sent::ChannelFailed
            }
        };
        self.changes.metrics_changed();
        Ok(sent)
    }

    /// Marks every settled row delivered (and a terminal row's job notified) in one durable
    /// write; they are forgotten only once that write is committed. On failure they stay, to be
    /// marked (never sent) again.
    async fn mark_settled(&self) -> Result<(), crate::store::StoreError> {
        let rows: Vec<(i64, Settled)> = self.settled.lock().unwrap().iter().map(|(id, s)| (*id, s.clone())).collect();
        if rows.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        let changed = self
            .store
            .write(move |tx| {
                // A statement for each kind of change, whatever the number of rows.
                let now = now_ms();
                let ids_of = |sent: bool| rows.iter().filter(|(_, s)| s.sent == sent).map(|(id, _)| *id).collect::<Vec<i64>>();
                store::outbox::settle(tx, &ids_of(true), now, ChannelTally::Delivered)?;
                store::outbox::settle(tx, &ids_of(false), now, ChannelTally::Dropped)?;
                let mut sent_to: Vec<&str> = Vec::new();
                let mut notified: Vec<(&str, &str)> = Vec::new();
                let mut changed: Vec<(&str, &str)> = Vec::new();
                for (_, Settled { channel, kind, subject, sent }) in &rows {
                    if *sent && !sent_to.contains(&channel.as_str()) {
                        sent_to.push(channel);
                    }
                    if let Subject::Job { provider, job_id } = subject {
                        let key = (provider.as_str(), job_id.as_str());
                        if *kind == Kind::Terminal && *sent && !notified.contains(&key) {
                            notified.push(key);
                        }
                        if !changed.contains(&key) {
                            changed.push(key);
                        }
                    }
                }
                jobs::mark_notified(tx, &notified, now)?;
                for channel in sent_to {
                    store::channels::send_succeeded(tx, channel, now)?;
                }
                Ok(changed.into_iter().map(|(provider, job_id)| (provider.to_owned(), job_id.to_owned())).collect::<Vec<_>>())
            })
            .await?;
        {
            let mut settled = self.settled.lock().unwrap();
            for id in ids {
                settled.remove(&id);
            }
        }
        // The jobs as the marks left them, for the change feed: read after the commit, on a
        // reader, rather than on the writer's thread (where every delivery waits).
        let jobs = self
            .store
            .read(move |db| {
                let keys: Vec<(&str, &str)> = changed.iter().map(|(provider, job_id)| (provider.as_str(), job_id.as_str())).collect();
                jobs::jobs_of(db, &keys)
            })
            .await?;
        for job in jobs {
            self.changes.job_changed(job);
        }
        self.changes.metrics_changed();
        Ok(())
    }
}
