//! The receiver: `POST /hooks/{provider}` and nothing else, the only port a tunnel may expose
//! (and `POST /hooks/{provider}/{token}` for a provider whose sender signs nothing: the token in
//! the URL is its secret, and its delivery only a hint that makes the engine poll the job).
//!
//! Order of work for every request, never changed (contract §2):
//! 1. read the raw body (over 1 MiB: 413, nothing stored);
//! 2. verify the signature on the raw bytes, in constant time (401, counted, nothing else stored
//!    but a masked copy among the last refused requests, with its likely cause: `refusal`);
//! 3. parse. For `generic` (the user's own sender) an unusable payload is 400 with a one-line
//!    reason. A real provider's verified request is never answered 4xx: an event of a kind
//!    NeverMiss does not act on is 200 `ignored`, an unparsable one 200 `rejected`. A rejected
//!    request is kept whole, once per delivery id (a resend answers `duplicate`);
//! 4. dedupe on (provider, delivery id), durably (200 duplicate);
//! 5. merge (200 applied or stale). A 200 is sent only after the commit; storage failure is 503.
//!
//! The receiver faces the internet (through a tunnel), so it runs its own HTTP/1 loop (`serve`)
//! rather than `axum::serve`, which has no read timeouts: a client must send its request head
//! within `HEADER_READ_TIMEOUT` and its body within `BODY_READ_TIMEOUT`, so slow clients cannot
//! hold connections (and memory) open forever.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tracing::Instrument;

use crate::after_merge;
use crate::kept_request::masked_request;
use crate::merge_point::{self, PushDelivery};
use crate::owner_account;
use crate::providers::{ParseError, ParsedDelivery, Provider, Unusable, VerifyError};
use crate::services::Services;
use crate::store::job::{now_ms, JobKey, Outcome};

/// Largest accepted body.
pub const MAX_BODY: usize = 1024 * 1024;
/// Largest body kept with an accepted delivery (a rejected one is kept whole).
pub const KEPT_BODY: usize = 64 * 1024;
/// Most time a client may take to send a request head, counted from when the server starts
/// waiting for it (so it is also how long an idle keep-alive connection is kept).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most time a client may take to send a body, once its head is read: 408, nothing stored.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Most connections the receiver keeps open at once. Past it, new connections wait in the OS's
/// accept queue until one closes: a flood of idle or slow connections cannot take more memory
/// than this many (each is also cut off by the read timeouts above).
pub const MAX_CONNECTIONS: usize = 1024;

/// The receiver's routes, its requests' bodies held within `budget` together.
pub fn router(services: Arc<Services>, budget: BodyBudget) -> Router {
    Router::new()
        .route("/hooks/{provider}", post(hook).fallback(method_not_allowed))
        // Only POST, and only for a provider that takes a token: anything else there is no route.
        .route("/hooks/{provider}/{token}", post(hook_with_token).fallback(not_found))
        .fallback(not_found)
        .layer(Extension(budget))
        .with_state(services)
}

/// What the receiver answers: `{"outcome": ...}` for a delivery it took, `{"error": ...}` otherwise.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct HookAnswer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub outcome: Option<Outcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub error: Option<String>,
}

fn answer(status: StatusCode, body: HookAnswer) -> Response {
    (status, Json(body)).into_response()
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    answer(status, HookAnswer { outcome: None, error: Some(message.to_string()) })
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not found: the receiver serves only POST /hooks/{provider} (or /hooks/{provider}/{token})")
}

async fn method_not_allowed() -> Response {
    let mut response = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: use POST");
    response.headers_mut().insert(axum::http::header::ALLOW, axum::http::HeaderValue::from_static("POST"));
    response
}

fn storage_unavailable(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "storage failed; answering 503 so the sender retries");
    error(StatusCode::SERVICE_UNAVAILABLE, "storage unavailable, retry later")
}

/// One delivery's story, each step a span under `delivery` (receive, verify, parse, then dedupe,
/// merge and enqueue on the writer thread):
/// `RUST_LOG=nevermiss_engine=debug,nevermiss_providers=debug,nevermiss_store=debug` prints it.
/// The contract's order of work, each step a function that answers when it refuses.
async fn hook(
    State(services): State<Arc<Services>>,
    Extension(budget): Extension<BodyBudget>,
    Path(provider_name): Path<String>,
    request: Request,
) -> Response {
    receive(services, budget, provider_name, None, request).await
}

/// `/hooks/{provider}/{token}`: the same steps, the sender proven by the token alone.
async fn hook_with_token(
    State(services): State<Arc<Services>>,
    Extension(budget): Extension<BodyBudget>,
    Path((provider_name, token)): Path<(String, String)>,
    request: Request,
) -> Response {
    receive(services, budget, provider_name, Some(token), request).await
}

#[tracing::instrument(name = "delivery", skip_all, fields(provider = %provider_name, delivery_id = tracing::field::Empty, job_id = tracing::field::Empty))]
async fn receive(services: Arc<Services>, budget: BodyBudget, provider_name: String, token: Option<String>, request: Request) -> Response {
    if let Some(refused) = cross_site(request.headers()) {
        return refused;
    }
    let Some(provider) = services.providers.get(&provider_name) else {
        return unknown_provider(&services, &budget, &provider_name, request).await;
    };
    if token.is_some() && !provider.takes_url_token() {
        let name = provider.name();
        return error(StatusCode::NOT_FOUND, format!("{name} takes no token in its webhook URL: its URL is /hooks/{name}"));
    }
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    // 1. The raw body, bounded (its bytes count against the budget until the answer).
    let (bytes, _held) = match read_body(headers, body, &budget).instrument(tracing::debug_span!("receive")).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    tracing::debug!(bytes = bytes.len(), "received");
    // 2. The signature on the raw bytes, then whose request it is.
    if let Err(response) = verify_or_refuse(&services, provider.as_ref(), token.as_deref(), headers, &bytes).await {
        return response;
    }
    if let Err(response) = owner_or_refuse(&services, provider.as_ref(), headers, &bytes).await {
        return response;
    }
    // 3. Parse, or keep what cannot be used.
    let parsed = match parse_or_keep(&services, provider.as_ref(), headers, &bytes).await {
        Ok(parsed) => parsed,
        Err(response) => return response,
    };
    // A URL-token sender's hint names a job as its sender knows it: find it as tracked.
    let parsed = match token {
        Some(_) => match hinted_job_or_ignore(&services, provider.as_ref(), parsed).await {
            Ok(parsed) => parsed,
            Err(response) => return response,
        },
        None => parsed,
    };
    // 4 and 5. Dedupe and merge, in one transaction, committed before the answer.
    merge_and_answer(&services, provider.as_ref(), headers, &bytes, parsed).await
}

/// A request a browser sent for a web page (an `Origin` header, or `Sec-Fetch-Site: cross-site`):
/// providers send neither, so it is answered 403 before anything is stored or counted, and a page
/// cannot push the real refusals out of the kept ones nor inflate the counts.
fn cross_site(headers: &HeaderMap) -> Option<Response> {
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()).map(str::trim);
    if headers.contains_key(axum::http::header::ORIGIN) || fetch_site.is_some_and(|s| s.eq_ignore_ascii_case("cross-site")) {
        return Some(error(StatusCode::FORBIDDEN, "requests from web pages are refused: the receiver takes webhooks from providers only"));
    }
    None
}

/// Step 2: the signature, on the raw bytes (or the URL's token, for a sender that signs nothing).
/// A refusal is answered 401 (or 503 when it cannot be checked now), counted and kept with its
/// likely cause among the last refused requests.
async fn verify_or_refuse(
    services: &Services,
    provider: &dyn Provider,
    token: Option<&str>,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<(), Response> {
    let verified = match token {
        Some(token) => provider.verify_url_token(token),
        None => provider.verify(headers, bytes).instrument(tracing::debug_span!("verify")).await,
    };
    tracing::debug!(verified = verified.is_ok(), "verified");
    let Err(e) = verified else { return Ok(()) };
    if let VerifyError::ForeignAccount(cause) = e {
        tracing::debug!(provider = provider.name(), "a delivery for another account was refused");
        let refused = crate::refusal::foreign_account(provider.name(), cause, headers, bytes);
        return Err(keep_refused(services, refused, error(StatusCode::UNAUTHORIZED, "not sent for this NeverMiss's account")).await);
    }
    let status = match e {
        VerifyError::NotConfigured(_) | VerifyError::BadSecret { .. } | VerifyError::Unavailable(_) => {
            tracing::warn!(provider = provider.name(), "delivery not verified: {e}");
            StatusCode::SERVICE_UNAVAILABLE
        }
        VerifyError::Missing(_) | VerifyError::Invalid | VerifyError::Expired | VerifyError::ForeignAccount(_) => {
            tracing::debug!(provider = provider.name(), "bad signature: {e}");
            StatusCode::UNAUTHORIZED
        }
    };
    let secret = services.secrets.get(provider.name(), crate::providers::SecretKind::WebhookSecret);
    let refused = crate::refusal::unverified(
        provider.name(),
        status.as_u16(),
        &e,
        secret.as_deref(),
        provider.secret_format(),
        headers,
        bytes,
        chrono::Utc::now().timestamp(),
    );
    Err(keep_refused(services, refused, error(status, e)).await)
}

/// Step 2, for a scheme that proves only the platform (`Provider::sender_account`): the request
/// must be for the owner's account (`owner_account`), learned from a job the owner tracked while
/// none is set; another account's is refused as unverified (401), counted and kept with why.
async fn owner_or_refuse(services: &Services, provider: &dyn Provider, headers: &HeaderMap, bytes: &[u8]) -> Result<(), Response> {
    let Some(sender) = provider.sender_account(headers) else { return Ok(()) };
    let name = provider.name();
    let owner = owner_account::configured(&services.settings, name);
    let tracked_by_owner = match (&owner, sender.job_id.clone()) {
        (None, Some(job_id)) => services
            .store
            .read(move |conn| crate::store::jobs::poll_target(conn, &JobKey::new(name, &job_id)))
            .await
            .map_err(storage_unavailable)?
            .is_some_and(|(job, _)| job.poll_url.is_some()),
        _ => false,
    };
    match owner_account::verdict(name, owner.as_deref(), &sender, tracked_by_owner) {
        owner_account::Verdict::Owner => Ok(()),
        owner_account::Verdict::Learned(account) => {
            services.settings.set(&owner_account::setting_key(name), &account).await.map_err(storage_unavailable)?;
            tracing::info!(provider = name, "learned the owner's account from a webhook of a job the owner tracked");
            Ok(())
        }
        owner_account::Verdict::Foreign(cause) => {
            tracing::debug!(provider = name, "a delivery for another account was refused");
            let refused = crate::refusal::foreign_account(name, cause, headers, bytes);
            Err(keep_refused(services, refused, error(StatusCode::UNAUTHORIZED, "not sent for this NeverMiss's account")).await)
        }
    }
}

/// Keeps a refused request (counted by its kind) and answers `answer`, or 503 if it cannot be kept.
async fn keep_refused(services: &Services, refused: crate::store::refused::NewRefusal, answer: Response) -> Response {
    let kept = services.store.write(move |tx| merge_point::record_refused(tx, &refused, now_ms())).await;
    services.changes.metrics_changed();
    match kept {
        Ok(()) => answer,
        Err(store_error) => storage_unavailable(store_error),
    }
}

/// Step 3: parse. A signed event of a kind NeverMiss does not act on is ignored (a real
/// provider's); any other unusable payload is kept whole as a rejected delivery.
async fn parse_or_keep(
    services: &Services,
    provider: &dyn Provider,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<ParsedDelivery, Response> {
    let parsed = tracing::debug_span!("parse").in_scope(|| provider.parse(headers, bytes)).and_then(|parsed| {
        // A job id that is no name would be put into the provider's URLs: kept, never merged.
        match crate::providers::job_id::is_a_name(&parsed.event.job_id) {
            Ok(()) => Ok(ParsedDelivery { event: parsed.event.bounded(), ..parsed }),
            Err(why) => Err(ParseError::malformed(format!("job id: {why}"), Some(parsed.delivery_id), None)),
        }
    });
    let unusable = match parsed {
        Ok(parsed) => return Ok(parsed),
        Err(unusable) => unusable,
    };
    let name = provider.name();
    if unusable.kind == Unusable::Unhandled && !provider.sender_is_users_own() {
        tracing::debug!(provider = name, reason = %unusable.reason, "ignored");
        let kept = services
            .store
            .write(move |tx| {
                // A type NeverMiss does not know at all (not one it knows and does not act on) is
                // also counted per type.
                if let Some(u) = &unusable.unknown {
                    tx.count_unknown_value(u.provider, u.field, &u.value);
                }
                merge_point::record_ignored(
                    tx,
                    name,
                    unusable.delivery_id.as_deref(),
                    unusable.job_id.as_deref(),
                    &unusable.reason,
                    now_ms(),
                )
            })
            .await;
        services.changes.metrics_changed();
        return Err(match kept {
            Ok(()) => answer(StatusCode::OK, HookAnswer { outcome: Some(Outcome::Ignored), error: None }),
            Err(e) => storage_unavailable(e),
        });
    }
    let raw = masked_request(headers, bytes, MAX_BODY);
    let reason = unusable.reason.clone();
    let kept = services
        .store
        .write(move |conn| {
            merge_point::record_rejected(
                conn,
                name,
                unusable.delivery_id.as_deref(),
                unusable.job_id.as_deref(),
                &raw,
                &unusable.reason,
                now_ms(),
            )
        })
        .await;
    services.changes.metrics_changed();
    Err(match kept {
        // The user's own sender is told why; a real provider is never answered 4xx.
        Ok(_) if provider.sender_is_users_own() => error(StatusCode::BAD_REQUEST, reason),
        Ok(outcome) => {
            tracing::debug!(provider = name, outcome = outcome.as_str(), %reason, "rejected");
            answer(StatusCode::OK, HookAnswer { outcome: Some(outcome), error: None })
        }
        Err(e) => storage_unavailable(e),
    })
}

/// Step 3, for a URL-token sender's hint: the tracked job it is about. A sender that signs
/// nothing may also not know the id a job is tracked by (RunPod's webhook says the job's id, while
/// its jobs are tracked as `<endpoint>/<job id>`, the endpoint being needed to poll): a hinted id
/// that is no tracked job is matched against the provider's unfinished jobs whose id's last `/`
/// piece it is (an ended job's, when no unfinished one is: a resend is a duplicate, a late hint
/// stale). Found once: the hint is about that job. Found nowhere: a job of that id is
/// created only when it can be polled as written (the hint only makes the engine poll it);
/// otherwise, or when several jobs match, the hint is about no job NeverMiss can poll: counted
/// among the ignored deliveries (200 `ignored`), nothing created.
async fn hinted_job_or_ignore(
    services: &Services,
    provider: &dyn Provider,
    mut parsed: ParsedDelivery,
) -> Result<ParsedDelivery, Response> {
    let name = provider.name();
    let hinted = parsed.event.job_id.clone();
    let wanted = hinted.clone();
    let matching = services
        .store
        .read(move |conn| {
            if crate::store::jobs::exists(conn, &JobKey::new(name, &wanted))? {
                return Ok(vec![wanted]);
            }
            let ends_with = |id: &String| id.rsplit_once('/').is_some_and(|(_, last)| last == wanted);
            let unfinished = crate::store::jobs::unfinished_since_before(conn, name, i64::MAX)?;
            let matching: Vec<String> = unfinished.into_iter().map(|(id, _)| id).filter(ends_with).collect();
            if !matching.is_empty() {
                return Ok(matching);
            }
            // A late or resent hint about a job that has ended since: the same job (a duplicate
            // or a stale event, never a new job).
            let filter = crate::store::jobs::JobFilter {
                provider: Some(name.to_owned()),
                q: Some(wanted.clone()),
                limit: Some(10),
                ..Default::default()
            };
            Ok(crate::store::jobs::list(conn, &filter)?.jobs.into_iter().map(|job| job.job_id).filter(ends_with).collect())
        })
        .await
        .map_err(storage_unavailable)?;
    let reason = match matching.as_slice() {
        [one] => {
            parsed.event.job_id = one.clone();
            return Ok(parsed);
        }
        [] if provider.check_job_id(&hinted).is_ok() => return Ok(parsed),
        [] => format!("a hint about {hinted:?}, which is no job NeverMiss tracks for {name} (and cannot be polled by that id alone)"),
        several => format!("a hint about {hinted:?}, which {} tracked jobs of {name} end with: which one cannot be told", several.len()),
    };
    tracing::debug!(provider = name, %reason, "ignored");
    let delivery_id = parsed.delivery_id;
    let kept = services.store.write(move |tx| merge_point::record_ignored(tx, name, Some(&delivery_id), None, &reason, now_ms())).await;
    services.changes.metrics_changed();
    Err(match kept {
        Ok(()) => answer(StatusCode::OK, HookAnswer { outcome: Some(Outcome::Ignored), error: None }),
        Err(e) => storage_unavailable(e),
    })
}

/// Steps 4 and 5: dedupe and merge in one transaction, committed before the answer; then the
/// changes are told and a thin delivery's job is polled.
async fn merge_and_answer(
    services: &Services,
    provider: &dyn Provider,
    headers: &HeaderMap,
    bytes: &[u8],
    parsed: ParsedDelivery,
) -> Response {
    let span = tracing::Span::current();
    span.record("delivery_id", parsed.delivery_id.as_str());
    span.record("job_id", parsed.event.job_id.as_str());
    tracing::debug!(state = parsed.event.state.as_str(), seq = parsed.event.seq, "parsed");
    // A thin delivery (it does not say enough, e.g. which run of a session ended): poll the job
    // right after answering, through reconciliation's usual path.
    let poll_after = provider.poll_after_push(&parsed.event).then(|| JobKey::new(provider.name(), parsed.event.job_id.clone()));
    let hinted = parsed.event.state == crate::store::job::JobState::Unknown;
    // The jobs that end with this one (a deleted session's open run), in the same write.
    let ends_with = provider.ends_with_it(&parsed.event);
    let push = PushDelivery { delivery_id: parsed.delivery_id, event: parsed.event, raw: masked_request(headers, bytes, KEPT_BODY) };
    let committed = match ends_with {
        // The common case: the push alone (one call on PostgreSQL).
        None => merge_point::push(&services.store, push).await.map(|result| (result, Vec::new())),
        Some(prefix) => {
            let write = move |conn: &mut crate::store::Tx<'_>| {
                let now = now_ms();
                let result = merge_point::accept_push(conn, &push, now)?;
                let ended = match result.outcome {
                    Outcome::Applied => merge_point::end_with(conn, &push.event, &prefix, &push.delivery_id, now)?,
                    _ => Vec::new(),
                };
                Ok((result, ended))
            };
            services.store.write(write).await
        }
    };
    let (result, ended) = match committed {
        Ok(committed) => committed,
        Err(e) => return storage_unavailable(e),
    };
    for merged in ended {
        after_merge::after_commit(merged, &services.outbox, &services.changes);
    }
    let (outcome, first_terminal) = (result.outcome, result.first_terminal);
    if !after_merge::after_commit(result, &services.outbox, &services.changes) {
        // A duplicate or a stale event: only the counts changed.
        services.changes.metrics_changed();
    }
    let mut outcome = outcome;
    if let (Some(key), Outcome::Applied | Outcome::Stale) = (poll_after, outcome) {
        let reconciler = services.reconciler.clone();
        let poll = tokio::spawn(
            async move {
                let polled = reconciler.poll_job(&key).await;
                if let Err(reason) = &polled {
                    tracing::debug!(provider = key.provider, job_id = key.id, %reason, "poll after a thin delivery");
                }
                polled
            }
            .in_current_span(),
        );
        // A hint carries no state (its own merge is stale for a job NeverMiss knows): its answer
        // is what the poll it asked for did, when that poll answers within `HINT_POLL_WAIT`.
        if hinted {
            if let Ok(Ok(Ok(crate::reconcile::PolledNow::Applied))) = tokio::time::timeout(HINT_POLL_WAIT, poll).await {
                outcome = Outcome::Applied;
            }
        }
    }
    tracing::debug!(outcome = outcome.as_str(), first_terminal, "answered");
    answer(StatusCode::OK, HookAnswer { outcome: Some(outcome), error: None })
}

/// The longest a hint's answer waits for the poll it asked for (the poll goes on after it).
const HINT_POLL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// `/hooks/{name}` for no provider: 404, and kept among the last refused requests (a mistyped
/// webhook URL is a common reason deliveries never arrive).
async fn unknown_provider(services: &Services, budget: &BodyBudget, name: &str, request: Request) -> Response {
    let name: String = name.chars().take(MAX_NAME_SHOWN).collect();
    let message = format!("unknown provider {name:?}");
    let (parts, body) = request.into_parts();
    let (bytes, _held) = match read_body(&parts.headers, body, budget).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let known: Vec<&str> = services.providers.names();
    let refused = crate::refusal::unknown_provider(&name, &known, &parts.headers, &bytes, &message);
    if let Err(e) = services.store.write(move |tx| merge_point::record_refused(tx, &refused, now_ms())).await {
        tracing::warn!(error = %e, "cannot keep a refused request");
    }
    error(StatusCode::NOT_FOUND, message)
}

/// Most characters of an unknown provider's name kept or answered (a 60 KB path stays small).
const MAX_NAME_SHOWN: usize = 64;

/// Most bytes of request bodies the receiver holds at once, across every connection: past it, a
/// request is answered 503 (the sender retries) rather than the memory growing with each slow
/// or stalled client. 64 MiB: 64 full-size bodies at once, far more than real senders need.
pub const BODIES_IN_FLIGHT: usize = 64 * 1024 * 1024;

/// The bytes of bodies held now, shared by every request of one receiver (`BODIES_IN_FLIGHT`).
#[derive(Clone)]
pub struct BodyBudget(Arc<tokio::sync::Semaphore>);

impl BodyBudget {
    pub fn new(bytes: usize) -> BodyBudget {
        BodyBudget(Arc::new(tokio::sync::Semaphore::new(bytes.min(tokio::sync::Semaphore::MAX_PERMITS))))
    }
}

async fn read_body(headers: &HeaderMap, body: Body, budget: &BodyBudget) -> Result<(bytes::Bytes, HeldBytes), Response> {
    let too_large = || error(StatusCode::PAYLOAD_TOO_LARGE, format!("body over {} bytes", MAX_BODY));
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY as u64) {
        return Err(too_large());
    }
    let collected = match tokio::time::timeout(BODY_READ_TIMEOUT, collect_limited(body, budget)).await {
        Ok(collected) => collected,
        Err(_) => {
            tracing::debug!("a client was too slow sending its body; answered 408");
            return Err(error(StatusCode::REQUEST_TIMEOUT, format!("the body did not arrive within {} s", BODY_READ_TIMEOUT.as_secs())));
        }
    };
    match collected {
        Ok(read) => Ok(read),
        Err(BodyError::OverBudget) => {
            tracing::warn!(budget = BODIES_IN_FLIGHT, "the receiver holds its most bytes of bodies; answered 503");
            Err(error(StatusCode::SERVICE_UNAVAILABLE, "the receiver is busy with other requests' bodies, retry later"))
        }
        Err(BodyError::Read(e)) if e.is::<LengthLimitError>() => Err(too_large()),
        Err(BodyError::Read(e)) => Err(error(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}"))),
    }
}

/// The budget's bytes a request's body holds, given back when the request is answered.
pub struct HeldBytes(#[allow(dead_code)] Option<tokio::sync::OwnedSemaphorePermit>);

enum BodyError {
    OverBudget,
    Read(axum::BoxError),
}

/// Reads the body, at most `MAX_BODY`, taking each frame's bytes from the budget as they arrive
/// (never sized from the declared length: a client that declares 1 MiB and sends nothing holds
/// nothing).
async fn collect_limited(body: Body, budget: &BodyBudget) -> Result<(bytes::Bytes, HeldBytes), BodyError> {
    let mut body = Limited::new(body, MAX_BODY);
    let mut buffer = bytes::BytesMut::new();
    let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else { continue };
        if data.is_empty() {
            continue;
        }
        let permit = budget.0.clone().try_acquire_many_owned(data.len() as u32).map_err(|_| BodyError::OverBudget)?;
        match held.as_mut() {
            Some(held) => held.merge(permit),
            None => held = Some(permit),
        }
        buffer.extend_from_slice(&data);
    }
    Ok((buffer.freeze(), HeldBytes(held)))
}

/// Serves the receiver's `app` on `listener` until `shutdown`, with its read timeouts (the head
/// within `HEADER_READ_TIMEOUT`; the body within `BODY_READ_TIMEOUT`, see `read_body`) and at most
/// `max_connections` open at once (`http_server`).
pub async fn serve(listener: tokio::net::TcpListener, app: Router, shutdown: tokio_util::sync::CancellationToken, max_connections: usize) {
    let limits = crate::http_server::Limits { name: "receiver", header_read_timeout: HEADER_READ_TIMEOUT, max_connections };
    crate::http_server::serve(listener, app, shutdown, limits).await
}
