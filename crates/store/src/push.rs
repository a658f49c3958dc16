//! A pushed delivery in one round trip on PostgreSQL: one call of the server-side function
//! `nevermiss_push` (migration V6, made again with the job's kind by V7, replaced by V8), which runs the whole push path in the call's own transaction:
//! the dedupe, the guarded upsert (the rule of `guard`, whose test compares the two), the outbox
//! rows of a first terminal state, the timeline row, the tallies and, through the schema's
//! triggers, the change feed. Called natively async on a pooled connection (no blocking thread,
//! no statement-by-statement round trips); its statement is prepared once per connection.
//!
//! SQLite runs the same path statement by statement in its writer's group commit
//! (`merge_point::accept_push` in the engine): there a statement costs no round trip.

use tokio_postgres::types::ToSql;

use crate::deliveries::RawRequest;
use crate::job::{Job, JobEvent, Outcome, Source, TERMINAL_RANK};
use crate::jobs::job_from_row;
use crate::sql::{self, DbError};

/// The call. Its parameters are the function's, in its order: the job's columns as the guarded
/// upsert numbers them (1 to 13, `guard`), then the delivery's (14 to 18), then the group the
/// sender names (19), then the job's result and page (20, 21: the guarded upsert's 14 and 15), then its kind (22: the
/// upsert's 16; migration V7 made the function again with it). The answer's columns
/// are read by name: the outcome, whether this was the job's first terminal state, the channels
/// that got an outbox row, the change feed's payloads to announce after the commit, and every
/// column of the job as the upsert left it (`(push_job).*`, NULL unless applied), which
/// `job_from_row` reads.
pub(crate) const CALL: &str = "SELECT p.push_outcome AS outcome, p.push_first_terminal AS first_terminal, p.push_channels AS channels,
            p.push_changes AS changes, p.push_described AS described, (p.push_job).*
     FROM nevermiss_push($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22) AS p";

/// One pushed delivery, as `nevermiss_push` takes it.
#[derive(Debug, Clone, Copy)]
pub struct PushCall<'a> {
    pub delivery_id: &'a str,
    pub event: &'a JobEvent,
    pub raw: &'a RawRequest,
    /// What the delivery's timeline row shows (its error, else its detail).
    pub event_detail: Option<&'a str>,
    pub now: i64,
}

/// What the call did.
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

impl PushCall<'_> {
    /// Runs the call on `client` (one round trip once its statement is prepared); what it did,
    /// and the change feed's payloads (one a line) to announce once it is committed.
    pub(crate) async fn run(&self, client: &impl deadpool_postgres::GenericClient) -> sql::Result<(Pushed, Option<String>)> {
        let ev = self.event;
        let statement = client.prepare_cached(CALL).await?;
        let (state, source) = (ev.state.as_str(), Source::Push.as_str());
        let (rank, body_truncated) = (ev.state.rank(), i64::from(self.raw.body_truncated));
        let result = ev.result.as_ref().filter(|r| !r.is_empty()).map(|r| r.to_column());
        let params: [&(dyn ToSql + Sync); 22] = [
            &ev.provider,
            &ev.job_id,
            &ev.label,
            &state,
            &rank,
            &ev.seq,
            &ev.error,
            &ev.detail,
            &self.now,
            &ev.finished_at,
            &source,
            &TERMINAL_RANK,
            &ev.started_at,
            &self.delivery_id,
            &self.raw.headers_json,
            &self.raw.body,
            &body_truncated,
            &self.event_detail,
            &ev.group,
            &result,
            &ev.provider_url,
            &ev.kind,
        ];
        let row = client.query_one(&statement, &params).await?;
        let outcome: String = row.try_get("outcome")?;
        let outcome =
            Outcome::parse(&outcome).ok_or_else(|| DbError::Schema(format!("nevermiss_push answered the outcome {outcome:?}")))?;
        let first_terminal: bool = row.try_get("first_terminal")?;
        let channels: Vec<String> = row.try_get("channels")?;
        let described: bool = row.try_get("described")?;
        let job = match outcome {
            Outcome::Applied => Some(job_from_row(&sql::pg_row(&row)?)?),
            Outcome::Stale if described => Some(job_from_row(&sql::pg_row(&row)?)?),
            _ => None,
        };
        let changes: Option<String> = row.try_get("changes")?;
        Ok((Pushed { outcome, first_terminal, channels, job, described }, changes))
    }
}
