// One job: what is known, every delivery and poll in order with what it did, the raw request
// behind each delivery, and "poll now".

import { useEffect, useRef, useState } from "preact/hooks";

import { ApiError, errorText, get, jobPath, send } from "../api";
import * as format from "../format";
import type { PollAnswer } from "../generated/PollAnswer";
import type { StoredDelivery } from "../generated/StoredDelivery";
import type { TimelineEvent } from "../generated/TimelineEvent";
import { metrics, onJob, onResync } from "../live";
import { providerProblem } from "../insights";
import { useStore } from "../store";
import { formatRoute } from "../route";
import { resultView } from "../resultview";
import { CopyButton, Empty, Notice, OutcomeBadge, SourceBadge, StateBadge, useNow, Usually } from "./common";
import { CancelAction } from "./CancelAction";
import { UntrackAction } from "./UntrackAction";
import type { JobDetail as JobDetailT } from "../generated/JobDetail";

type Detail = JobDetailT;

export function JobDetail({ provider, jobId, askCancel = false }: { provider: string; jobId: string; askCancel?: boolean }) {
  const [job, setJob] = useState<Detail | null>(null);
  const [missing, setMissing] = useState(false);
  const [error, setError] = useState("");
  const [polling, setPolling] = useState(false);
  const [pollResult, setPollResult] = useState<{ ok: boolean; text: string } | null>(null);
  const now = useNow(10_000);
  const currentMetrics = useStore(metrics);

  const loadSeq = useRef(0);
  const load = async () => {
    // Loads can overlap (a change arrives while one runs): only the latest answer is shown.
    const seq = ++loadSeq.current;
    try {
      const detail = await get<Detail>(jobPath(provider, jobId));
      if (seq !== loadSeq.current) return;
      setJob(detail);
      setMissing(false);
      setError("");
    } catch (e) {
      if (seq !== loadSeq.current) return;
      if (e instanceof ApiError && e.status === 404) setMissing(true);
      else setError(errorText(e));
    }
  };

  useEffect(() => {
    setJob(null);
    setPollResult(null);
    void load();
    const offJob = onJob((j) => {
      if (j.provider === provider && j.job_id === jobId) void load();
    });
    const offResync = onResync(() => void load());
    return () => {
      offJob();
      offResync();
    };
  }, [provider, jobId]);

  const pollNow = async () => {
    setPolling(true);
    setPollResult(null);
    try {
      const answer = await send<PollAnswer>("POST", `${jobPath(provider, jobId)}/poll`);
      setPollResult(
        answer.polled
          ? { ok: true, text: `The provider says: ${answer.job.state}.` }
          : { ok: false, text: `Could not poll: ${answer.reason ?? "no reason given"}` },
      );
      await load();
    } catch (e) {
      setPollResult({ ok: false, text: errorText(e) });
    } finally {
      setPolling(false);
    }
  };

  // The heading is the same element while the job loads and once it is shown, so the focus
  // put on it after navigation (App.tsx) stays there.
  const head = (
    <div class="detail-head">
      <div>
        <h1 tabIndex={-1}>
          {job && <StateBadge state={job.state} />} {format.visible(job ? (job.label ?? job.job_id) : jobId)}
        </h1>
        {job && (
          <div class="id-line">
            <span class="muted">{job.provider}</span>
            <code class="mono" data-testid="job-id">
              {job.job_id}
            </code>
            <CopyButton text={job.job_id} label="Copy id" testId="copy-id" />
          </div>
        )}
      </div>
      {job && (
        <div class="detail-actions">
          <button type="button" class="btn" onClick={pollNow} disabled={polling} data-testid="poll-now" title="Ask the provider about this job now">
            {polling ? "Polling…" : "↻ Poll now"}
          </button>
          <CancelAction key={`${job.provider}/${job.job_id}/${askCancel}`} provider={job.provider} jobId={job.job_id} label={job.label ?? job.job_id} state={job.state} ask={askCancel} />
          <UntrackAction key={`${job.provider}/${job.job_id}`} provider={job.provider} jobId={job.job_id} label={job.label ?? job.job_id} />
        </div>
      )}
    </div>
  );

  if (missing) {
    return (
      <section class="screen">
        <a href="#/jobs" class="back">
          ← Jobs
        </a>
        {head}
        <Empty title="No such job" testId="job-missing">
          <p>
            NeverMiss does not watch <code>{provider}/{jobId}</code>. Track it from the Jobs screen, or check the id.
          </p>
        </Empty>
      </section>
    );
  }
  if (!job) {
    return (
      <section class="screen">
        <a href="#/jobs" class="back">
          ← Jobs
        </a>
        {head}
        {error ? <Notice level="error" title="Cannot load the job">{error}</Notice> : <p class="muted">Loading…</p>}
      </section>
    );
  }

  const t = format.jobTime(job, now);
  const providerHealth = currentMetrics?.providers[job.provider] ?? null;
  const terminal = ["succeeded", "failed", "canceled", "needs_input", "ended"].includes(job.state);
  const result = resultView(job);
  return (
    <section class="screen job-detail" data-testid="job-detail">
      <a href="#/jobs" class="back">
        ← Jobs
      </a>
      {head}
      {pollResult && (
        <Notice level={pollResult.ok ? "ok" : "warn"} testId="poll-result">
          {pollResult.text}
        </Notice>
      )}
      {job.state === "failed" && job.error && <Notice level="error" title="The job failed">{format.visible(job.error)}</Notice>}
      {!terminal && providerHealth && providerProblem(job.provider, providerHealth.status) && (
        <Notice level="warn" title={providerProblem(job.provider, providerHealth.status)} testId="provider-problem">
          {providerHealth.message ? `${providerHealth.message}. ` : ""}A webhook still ends it; set {job.provider} up in Settings, Providers.
        </Notice>
      )}
      {job.abandoned_at && !terminal ? (
        <Notice level="warn" title="Not polled any more (abandoned)" testId="abandoned">
          Polling gave up on this job {format.ago(job.abandoned_at)}: {format.abandonReason(job.abandoned_reason)}
          {job.poll_error ? ` (${job.poll_error})` : ""}. A webhook still finishes it; Poll now, or tracking it again (with its status
          URL), polls it again.
        </Notice>
      ) : (
        job.poll_error &&
        !terminal && (
          <Notice level="warn" title="The last poll failed">
            {job.poll_error}
          </Notice>
        )
      )}

      {result && (
        <div class="result" data-testid="job-result">
          <h2>Result</h2>
          {result.image && (
            <a href={result.image} target="_blank" rel="noopener noreferrer">
              <img class="result-image" src={result.image} alt="The job's first image output" referrerpolicy="no-referrer" data-testid="result-image" />
            </a>
          )}
          {result.text && (
            <pre class="result-text" data-testid="result-text">
              {result.text}
            </pre>
          )}
          {result.links.length > 0 && (
            <ul class="result-links" data-testid="result-links">
              {result.links.map((l) => (
                <li key={l.url}>
                  <a href={l.url} target="_blank" rel="noopener noreferrer">
                    {l.label}
                  </a>
                </li>
              ))}
            </ul>
          )}
        </div>
      )}

      <dl class="facts">
        <div>
          <dt>{terminal ? "Took" : "Running for"}</dt>
          <dd>
            {t.text}
            <Usually job={job} now={now} />
          </dd>
        </div>
        <div>
          <dt>End learned by</dt>
          <dd>
            <SourceBadge source={job.terminal_source} />
            {job.terminal_source === "pull" && <span class="muted small"> (no webhook came first)</span>}
          </dd>
        </div>
        {job.group && (
          <div>
            <dt>Group</dt>
            <dd>
              <a href={formatRoute({ screen: "jobs", state: "", provider: "", q: "", group: job.group })} data-testid="detail-group">
                {job.group}
              </a>
            </dd>
          </div>
        )}
        <div>
          <dt>First seen</dt>
          <dd>{format.dateTime(job.created_at)}</dd>
        </div>
        <div>
          <dt>Finished</dt>
          <dd>{format.dateTime(job.finished_at)}</dd>
        </div>
        <div>
          <dt>Notified</dt>
          <dd>{job.notified_at ? format.dateTime(job.notified_at) : terminal ? "pending" : "–"}</dd>
        </div>
        <div>
          <dt>Last polled</dt>
          <dd>{job.last_polled_at ? format.ago(job.last_polled_at, now) : "never"}</dd>
        </div>
        <div>
          <dt>Version (seq)</dt>
          <dd>{job.seq ?? "–"}</dd>
        </div>
        {job.detail && (
          <div class="wide">
            <dt>Detail</dt>
            <dd>{job.detail}</dd>
          </div>
        )}
      </dl>

      <h2>Timeline</h2>
      {job.timeline.length === 0 ? (
        <p class="muted" data-testid="timeline-empty">
          Nothing yet: no delivery has arrived and no poll has answered. NeverMiss polls tracked jobs every few minutes; use Poll now
          to ask at once.
        </p>
      ) : (
        <ol class="timeline" data-testid="timeline">
          {job.timeline.map((e, i) => (
            <TimelineItem event={e} provider={job.provider} key={i} />
          ))}
        </ol>
      )}
    </section>
  );
}

function TimelineItem({ event, provider }: { event: TimelineEvent; provider: string }) {
  const [open, setOpen] = useState(false);
  const [delivery, setDelivery] = useState<StoredDelivery | null>(null);
  const [error, setError] = useState("");

  const toggle = async () => {
    const next = !open;
    setOpen(next);
    if (next && !delivery && event.delivery_id) {
      try {
        setDelivery(await get<StoredDelivery>(`/api/deliveries/${encodeURIComponent(provider)}/${encodeURIComponent(event.delivery_id)}`));
      } catch (e) {
        setError(e instanceof ApiError && e.status === 404 ? "This request is no longer kept (older than the retention)." : errorText(e));
      }
    }
  };

  return (
    <li class={`tl tl-${event.outcome}`} data-outcome={event.outcome} data-testid="timeline-event">
      <div class="tl-row">
        <span class="tl-time" title={event.at}>
          {format.dateTime(event.at)}
        </span>
        <SourceBadge source={event.source} />
        <span class="tl-state">{event.state ? <b>{event.state}</b> : <span class="muted">no state</span>}</span>
        {event.seq !== null && <span class="muted small">seq {event.seq}</span>}
        <OutcomeBadge outcome={event.outcome} />
        {event.delivery_id && (
          <span class="muted small mono" title="delivery id">
            {event.delivery_id}
          </span>
        )}
        {event.delivery_id && (
          <button type="button" class="btn small link" onClick={toggle} aria-expanded={open} data-testid="show-request">
            {open ? "Hide request" : "Show request"}
          </button>
        )}
      </div>
      {event.detail && <div class="tl-detail">{event.detail}</div>}
      {open && (
        <div class="request" data-testid="request">
          {error && <p class="muted">{error}</p>}
          {!delivery && !error && <p class="muted">Loading…</p>}
          {delivery && <RawRequest delivery={delivery} />}
        </div>
      )}
    </li>
  );
}

function RawRequest({ delivery }: { delivery: StoredDelivery }) {
  let body = delivery.body;
  try {
    body = JSON.stringify(JSON.parse(delivery.body), null, 2);
  } catch {
    // Not JSON: shown as it came.
  }
  return (
    <div>
      <p class="muted small">
        Received {format.dateTime(delivery.received_at)} · stored as <b>{delivery.status}</b>
        {delivery.reason ? ` · ${delivery.reason}` : ""} · credentials are masked
      </p>
      <table class="headers" data-testid="request-headers">
        <tbody>
          {Object.entries(delivery.headers ?? {}).map(([k, v]) => (
            <tr>
              <th>{k}</th>
              <td class="mono">{v}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <pre class="body" data-testid="request-body">
        {body}
      </pre>
      {delivery.body_truncated && <p class="muted small">The body was longer; only its start is kept.</p>}
    </div>
  );
}
