//! Pushed deliveries in groups on PostgreSQL: the deliveries a process has waiting are applied in
//! one call of the server-side function `nevermiss_push_group`, one round trip and one transaction
//! for the group. The function runs each delivery's whole push path (dedupe, the guarded upsert of
//! `guard`, the outbox rows, the timeline row, the tallies), taking the jobs in (provider, job id)
//! order so that concurrent groups never deadlock. The grouping is `postgres::push_groups`; a group
//! that fails is run again one delivery at a time. SQLite runs the same path statement by statement
//! in its writer (`merge_point::accept_push` in the engine).

use tokio_postgres::types::ToSql;

use crate::deliveries::RawRequest;
use crate::job::{Job, JobEvent, Outcome, Source, TERMINAL_RANK};
use crate::jobs::job_from_row;
use crate::sql::{self, DbError};

/// The call. Its parameters are the function's, in its order, each an array of one element per
/// delivery but the source and the terminal rank: the job's columns as the guarded upsert numbers
/// them (1 to 13, `guard`), then the delivery's (14 to 18), then the group the sender names (19),
/// then the job's result and page (20, 21: the guarded upsert's 14 and 15), then its kind (22: the
/// upsert's 16). The answer is a row per delivery: its place in the arrays (`push_index`, counted
/// from one) and its columns, read by name: the outcome, whether this was the job's first
/// terminal state, the channels that got an outbox row, and every column of the job as the upsert
/// left it (`(push_job).*`, NULL unless applied or described), which `job_from_row` reads. A last
/// row, `push_index` 0, holds the change feed's payloads of the group, announced after the commit.
pub(crate) const CALL: &str = "SELECT p.push_index AS push_index, p.push_outcome AS outcome, p.push_first_terminal AS first_terminal,
            p.push_channels AS channels, p.push_changes AS changes, p.push_described AS described, (p.push_job).*
     FROM nevermiss_push_group($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22) AS p";

/// Most deliveries one group takes (a group that fails is run again one by one, each its own
/// transaction).
pub(crate) const MAX_GROUP: usize = 64;

/// One pushed delivery, as the push path takes it.
#[derive(Debug, Clone, Copy)]
pub struct PushCall<'a> {
    pub delivery_id: &'a str,
    pub event: &'a JobEvent,
    pub raw: &'a RawRequest,
    /// What the delivery's timeline row shows (its error, else its detail).
    pub event_detail: Option<&'a str>,
    pub now: i64,
}

/// A delivery waiting for its group: the call, owned.
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    pub delivery_id: String,
    pub event: JobEvent,
    pub raw: RawRequest,
    pub event_detail: Option<String>,
    pub now: i64,
}

impl From<PushCall<'_>> for Waiting {
    fn from(call: PushCall<'_>) -> Waiting {
        Waiting {
            delivery_id: call.delivery_id.to_owned(),
            event: call.event.clone(),
            raw: call.raw.clone(),
            event_detail: call.event_detail.map(str::to_owned),
            now: call.now,
        }
    }
}

/// What the call did with one delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Pushed {
    /// `Applied`, `Stale` or `Duplicate`.
    pub outcome: Outcome,
    /// This delivery moved the job into a terminal state (once per job).
    pub first_terminal: bool,
    /// The channels that got an outbox row (a first terminal state only).
    pub channels: Vec<String>,
    /// The job as the upsert left it, when it was applied (or described).
    pub job: Option<Job>,
    /// A stale event filled in the job's result or page.
    pub described: bool,
}

/// Runs one group's call on `client` (one round trip once its statement is prepared; in the
/// call's own transaction unless `client` is one): what it did with each delivery, in the order
/// given, and the change feed's payloads (one a line) to announce once it is committed.
pub(crate) async fn run_group(
    client: &impl deadpool_postgres::GenericClient,
    group: &[Waiting],
) -> sql::Result<(Vec<Pushed>, Option<String>)> {
    let statement = client.prepare_cached(CALL).await?;
    let providers: Vec<&str> = group.iter().map(|w| w.event.provider.as_str()).collect();
    let job_ids: Vec<&str> = group.iter().map(|w| w.event.job_id.as_str()).collect();
    let labels: Vec<Option<&str>> = group.iter().map(|w| w.event.label.as_deref()).collect();
    let states: Vec<&str> = group.iter().map(|w| w.event.state.as_str()).collect();
    let ranks: Vec<i64> = group.iter().map(|w| w.event.state.rank()).collect();
    let seqs: Vec<i64> = group.iter().map(|w| w.event.seq).collect();
    let errors: Vec<Option<&str>> = group.iter().map(|w| w.event.error.as_deref()).collect();
    let details: Vec<Option<&str>> = group.iter().map(|w| w.event.detail.as_deref()).collect();
    let nows: Vec<i64> = group.iter().map(|w| w.now).collect();
    let finished_ats: Vec<Option<i64>> = group.iter().map(|w| w.event.finished_at).collect();
    let source = Source::Push.as_str();
    let started_ats: Vec<Option<i64>> = group.iter().map(|w| w.event.started_at).collect();
    let delivery_ids: Vec<&str> = group.iter().map(|w| w.delivery_id.as_str()).collect();
    let headers: Vec<&str> = group.iter().map(|w| w.raw.headers_json.as_str()).collect();
    let bodies: Vec<&[u8]> = group.iter().map(|w| w.raw.body.as_slice()).collect();
    let truncated: Vec<i64> = group.iter().map(|w| i64::from(w.raw.body_truncated)).collect();
    let event_details: Vec<Option<&str>> = group.iter().map(|w| w.event_detail.as_deref()).collect();
    let groups: Vec<Option<&str>> = group.iter().map(|w| w.event.group.as_deref()).collect();
    let results: Vec<Option<String>> =
        group.iter().map(|w| w.event.result.as_ref().filter(|r| !r.is_empty()).map(|r| r.to_column())).collect();
    let provider_urls: Vec<Option<&str>> = group.iter().map(|w| w.event.provider_url.as_deref()).collect();
    let kinds: Vec<Option<&str>> = group.iter().map(|w| w.event.kind.as_deref()).collect();
    let params: [&(dyn ToSql + Sync); 22] = [
        &providers,
        &job_ids,
        &labels,
        &states,
        &ranks,
        &seqs,
        &errors,
        &details,
        &nows,
        &finished_ats,
        &source,
        &TERMINAL_RANK,
        &started_ats,
        &delivery_ids,
        &headers,
        &bodies,
        &truncated,
        &event_details,
        &groups,
        &results,
        &provider_urls,
        &kinds,
    ];
    let rows = client.query(&statement, &params).await?;
    let mut answers: Vec<Option<Pushed>> = vec![None; group.len()];
    let mut changes = None;
    for row in &rows {
        let index: i64 = row.try_get("push_index")?;
        if index == 0 {
            changes = row.try_get("changes")?;
            continue;
        }
        let slot = usize::try_from(index - 1)
            .ok()
            .and_then(|i| answers.get_mut(i))
            .ok_or_else(|| DbError::Schema(format!("nevermiss_push_group answered for delivery {index} of {}", group.len())))?;
        let outcome: String = row.try_get("outcome")?;
        let outcome =
            Outcome::parse(&outcome).ok_or_else(|| DbError::Schema(format!("nevermiss_push_group answered the outcome {outcome:?}")))?;
        let described: bool = row.try_get("described")?;
        let job = match outcome {
            Outcome::Applied => Some(job_from_row(&sql::pg_row(row)?)?),
            Outcome::Stale if described => Some(job_from_row(&sql::pg_row(row)?)?),
            _ => None,
        };
        *slot =
            Some(Pushed { outcome, first_terminal: row.try_get("first_terminal")?, channels: row.try_get("channels")?, job, described });
    }
    let pushed = answers
        .into_iter()
        .enumerate()
        .map(|(i, answer)| answer.ok_or_else(|| DbError::Schema(format!("nevermiss_push_group gave no answer for delivery {}", i + 1))))
        .collect::<sql::Result<Vec<_>>>()?;
    Ok((pushed, changes))
}
