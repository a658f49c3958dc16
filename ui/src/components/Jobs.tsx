// Jobs: every watched job, newest first, live. Filters by state and provider, search by id, label
// or group, pages of 100 with "Load more" (keyset paging on the server, cheap at any depth).

import { useEffect, useMemo, useRef, useState } from "preact/hooks";

import { ApiError, errorText, get } from "../api";
import * as format from "../format";
import type { GroupList } from "../generated/GroupList";
import type { GroupSummary } from "../generated/GroupSummary";
import type { Job } from "../generated/Job";
import type { JobPage } from "../generated/JobPage";
import type { JobState } from "../generated/JobState";
import { appendPage, applyJobChange, type Filters, jobKey } from "../jobsview";
import { info as infoStore, metrics as metricsStore, onJob, onResync } from "../live";
import { formatRoute, jobHref } from "../route";
import { useStore } from "../store";
import { Empty, Notice, SourceBadge, StateBadge, stateText, useNow, Usually } from "./common";
import { Guide } from "./Guide";
import { TrackForm } from "./TrackForm";

const PAGE = 100;
const STATES: JobState[] = ["running", "queued", "succeeded", "failed", "canceled", "needs_input", "ended", "unknown"];

function query(f: Filters, cursor?: string | null): string {
  const p = new URLSearchParams({ limit: String(PAGE) });
  if (f.state) p.set("state", f.state);
  if (f.provider) p.set("provider", f.provider);
  if (f.q.trim()) p.set("q", f.q.trim());
  if (f.group) p.set("group", f.group);
  if (cursor) p.set("cursor", cursor);
  return `/api/jobs?${p}`;
}

export function Jobs({ filters }: { filters: Filters }) {
  const info = useStore(infoStore);
  const metrics = useStore(metricsStore);
  const now = useNow(10_000);
  const [jobs, setJobs] = useState<Job[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [loadingMore, setLoadingMore] = useState(false);
  const [error, setError] = useState("");
  const [fresh, setFresh] = useState<Set<string>>(new Set());
  const [showTrack, setShowTrack] = useState(false);
  const [tracked, setTracked] = useState("");
  const [trackProblem, setTrackProblem] = useState<string | null>(null);
  const [search, setSearch] = useState(filters.q);
  const state = useRef({ jobs, cursor, filters });
  state.current = { jobs, cursor, filters };

  const navigate = (f: Filters, replace = false) => {
    const hash = formatRoute({ screen: "jobs", ...f });
    if (replace) history.replaceState(null, "", hash);
    else location.hash = hash;
    if (replace) window.dispatchEvent(new HashChangeEvent("hashchange"));
  };

  // Search as you type, without a history entry per key.
  useEffect(() => {
    if (search === filters.q) return;
    const t = setTimeout(() => navigate({ ...filters, q: search }, true), 250);
    return () => clearTimeout(t);
  }, [search]);
  // The box follows a search changed elsewhere (back, a link), not the one it already shows: an
  // effect that also ran at mount emptied what was typed before the first paint.
  const followedQ = useRef(filters.q);
  useEffect(() => {
    if (filters.q === followedQ.current) return;
    followedQ.current = filters.q;
    setSearch(filters.q);
  }, [filters.q]);

  // Job changes that arrive while a page is being fetched are kept and folded into that page
  // when it comes, so a job that appears mid-load is not lost to the older answer.
  const pending = useRef<Job[] | null>(null);
  const loadSeq = useRef(0);

  const load = async (signal?: AbortSignal) => {
    const seq = ++loadSeq.current;
    setLoading(true);
    pending.current = [];
    try {
      const page = await get<JobPage>(query(filters), signal);
      if (seq !== loadSeq.current) return;
      let list = page.jobs;
      for (const job of pending.current ?? []) list = applyJobChange(list, job, filters, page.next_cursor === null).jobs;
      pending.current = null;
      setJobs(list);
      setCursor(page.next_cursor);
      setError("");
    } catch (e) {
      if ((e as Error).name === "AbortError" || seq !== loadSeq.current) return;
      pending.current = null;
      setError(e instanceof ApiError ? e.message : errorText(e));
    } finally {
      if (seq === loadSeq.current) setLoading(false);
    }
  };

  useEffect(() => {
    const abort = new AbortController();
    void load(abort.signal);
    return () => abort.abort();
  }, [filters.state, filters.provider, filters.q, filters.group]);

  // The groups and their progress, read again when one of their jobs changes (at most once a
  // second while a sweep is busy).
  const [groups, setGroups] = useState<GroupSummary[]>([]);
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | null = null;
    const reload = () => {
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        get<GroupList>("/api/groups?limit=12")
          .then((g) => setGroups(g.groups))
          .catch(() => {});
      }, 1000);
    };
    get<GroupList>("/api/groups?limit=12")
      .then((g) => setGroups(g.groups))
      .catch(() => {});
    const offJob = onJob((job) => {
      if (job.group) reload();
    });
    const offResync = onResync(reload);
    return () => {
      offJob();
      offResync();
      if (timer) clearTimeout(timer);
    };
  }, []);

  useEffect(() => {
    const offJob = onJob((job) => {
      pending.current?.push(job);
      const s = state.current;
      const result = applyJobChange(s.jobs, job, s.filters, s.cursor === null);
      if (!result.changed) return;
      setJobs(result.jobs);
      const key = jobKey(job);
      setFresh((f) => new Set(f).add(key));
      setTimeout(
        () =>
          setFresh((f) => {
            const n = new Set(f);
            n.delete(key);
            return n;
          }),
        2500,
      );
    });
    const offResync = onResync(() => void load());
    return () => {
      offJob();
      offResync();
    };
  }, []);

  // "/" jumps to the search box, as in most developer tools.
  const searchBox = useRef<HTMLInputElement>(null);
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const target = e.target as HTMLElement | null;
      if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey) return;
      if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT")) return;
      e.preventDefault();
      searchBox.current?.focus();
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, []);

  const loadMore = async () => {
    if (!cursor) return;
    setLoadingMore(true);
    try {
      const page = await get<JobPage>(query(filters, cursor));
      setJobs((j) => appendPage(j, page.jobs));
      setCursor(page.next_cursor);
    } catch (e) {
      setError(errorText(e));
    } finally {
      setLoadingMore(false);
    }
  };

  const byState = metrics?.jobs_by_state ?? {};
  const total = Object.values(byState).reduce((a, b) => a + b, 0);
  const providers = info?.providers ?? [];
  const filtered = !!(filters.state || filters.provider || filters.q || filters.group);
  // A total is known when only the state filter is used (the counts are per state).
  const knownTotal = filters.provider || filters.q || filters.group ? null : filters.state ? (byState[filters.state] ?? 0) : total;

  const chips = useMemo(
    () => [
      { value: "", label: "All", n: total },
      ...STATES.map((s) => ({ value: s, label: stateText(s), n: byState[s] ?? 0 })).filter((c) => c.n > 0 || c.value === filters.state || c.value === "running"),
    ],
    [metrics, filters.state],
  );

  return (
    <section class="screen jobs" data-testid="jobs-screen">
      <h1 tabIndex={-1}>Jobs</h1>
      <div class="toolbar">
        <div class="chips" role="tablist" aria-label="Filter by state">
          {chips.map((c) => (
            <button
              type="button"
              role="tab"
              aria-selected={filters.state === c.value}
              class={`chip ${filters.state === c.value ? "active" : ""} ${c.value ? `chip-${c.value}` : ""}`}
              data-testid={`state-filter-${c.value || "all"}`}
              onClick={() => navigate({ ...filters, state: c.value })}
            >
              {c.label} <span class="chip-n">{format.count(c.n)}</span>
            </button>
          ))}
        </div>
        <div class="toolbar-right">
          <select
            aria-label="Provider"
            data-testid="provider-filter"
            value={filters.provider}
            onChange={(e) => navigate({ ...filters, provider: (e.target as HTMLSelectElement).value })}
          >
            <option value="">All providers</option>
            {providers.map((p) => (
              <option value={p}>{p}</option>
            ))}
          </select>
          <input
            type="search"
            class="search"
            ref={searchBox}
            placeholder="Search id, label or group  /"
            aria-label="Search by job id, label or group"
            data-testid="search"
            value={search}
            onInput={(e) => setSearch((e.target as HTMLInputElement).value)}
          />
          <button type="button" class={`btn ${showTrack ? "" : "primary"}`} data-testid="track-toggle" onClick={() => setShowTrack(!showTrack)}>
            {showTrack ? "Close" : "+ Track a job"}
          </button>
        </div>
      </div>

      {(groups.length > 0 || filters.group) && (
        <div class="groups" data-testid="groups">
          {filters.group && (
            <button type="button" class="chip active" data-testid="group-filter" title="Show every job" onClick={() => navigate({ ...filters, group: "" })}>
              Group: {filters.group} ×
            </button>
          )}
          {groups
            .filter((g) => g.name !== filters.group || !filters.group)
            .map((g) => (
              <button
                type="button"
                class={`group-card ${g.running === 0 ? "done" : ""} ${(g.by_state.failed ?? 0) > 0 ? "has-failed" : ""}`}
                data-testid="group"
                data-group={g.name}
                title={g.slowest_running ? `Running longest: ${g.slowest_running.label ?? g.slowest_running.job_id}, since ${format.ago(g.slowest_running.created_at, now)}` : ""}
                onClick={() => navigate({ ...filters, group: g.name })}
              >
                <span class="group-name">{g.name}</span>
                <span class="group-progress">{format.groupProgress(g)}</span>
                {g.duration_ms !== null && <span class="muted small">{format.duration(g.duration_ms)}</span>}
              </button>
            ))}
        </div>
      )}

      {showTrack && (
        <div class="panel">
          <p class="muted small">
            Start watching a job by its id. NeverMiss polls the provider for it, so its end is caught even if no webhook ever arrives.
          </p>
          <TrackForm
            providers={providers}
            onTracked={(answer, created) => {
              setTracked(`${created ? "Now tracking" : "Already tracked:"} ${answer.provider}/${answer.job_id}`);
              setTrackProblem(answer.poll_problem);
              // A problem stays until the next track; the confirmation alone fades.
              if (!answer.poll_problem) setTimeout(() => setTracked(""), 4000);
            }}
          />
          {tracked && (
            <p class="ok-text" data-testid="track-ok">
              {tracked}
            </p>
          )}
          {trackProblem && (
            <Notice level="warn" title="It cannot be polled yet" testId="track-problem">
              {trackProblem}
            </Notice>
          )}
        </div>
      )}

      {error && (
        <Notice level="error" title="Cannot load the jobs">
          {error}
        </Notice>
      )}

      {loading && jobs.length === 0 ? (
        <p class="muted" data-testid="jobs-loading">
          Loading…
        </p>
      ) : !loading && jobs.length === 0 && !error ? (
        filtered ? (
          <Empty title="No jobs match these filters" testId="jobs-empty-filtered">
            <p>
              {filters.q ? `Nothing has “${filters.q}” in its id or label` : "No job is in this state"}
              {filters.provider ? ` for ${filters.provider}` : ""}
              {filters.group ? ` in group ${filters.group}` : ""}.{" "}
              <a href="#/jobs" data-testid="clear-filters">
                Show all jobs
              </a>
            </p>
          </Empty>
        ) : (
          <div data-testid="jobs-empty">
            <Empty title="No jobs yet">
              <p>
                Jobs appear here the moment a webhook arrives or you track one. Point a provider's webhook at NeverMiss, or use{" "}
                <b>+ Track a job</b> above (or <code>nevermiss track PROVIDER JOB_ID</code>).
              </p>
            </Empty>
            <Guide compact />
          </div>
        )
      ) : (
        <div class="table-wrap">
          <table class="jobs-table" data-testid="jobs-table">
            <thead>
              <tr>
                <th class="col-state">State</th>
                <th>Job</th>
                <th class="col-provider">Provider</th>
                <th class="col-time">Age / took</th>
                <th class="col-end" title="How the end was learned: push (webhook) or pull (polling)">
                  End by
                </th>
                <th class="col-updated">Updated</th>
              </tr>
            </thead>
            <tbody>
              {jobs.map((j) => {
                const t = format.jobTime(j, now);
                const key = jobKey(j);
                return (
                  <tr
                    key={key}
                    class={fresh.has(key) ? "fresh" : ""}
                    data-job={`${j.provider}/${j.job_id}`}
                    onClick={() => (location.hash = jobHref(j.provider, j.job_id))}
                  >
                    <td class="col-state">
                      <StateBadge state={j.state} />
                    </td>
                    <td class="job-cell">
                      <a href={jobHref(j.provider, j.job_id)} onClick={(e) => e.stopPropagation()}>
                        {j.label ? <span class="job-label">{format.visible(j.label)}</span> : null}
                        <span class={`mono ${j.label ? "job-id-sub" : "job-id"}`}>{j.job_id}</span>
                      </a>
                      {j.group && (
                        <a
                          class="group-badge"
                          data-testid="job-group"
                          href={formatRoute({ screen: "jobs", state: "", provider: "", q: "", group: j.group })}
                          onClick={(e) => e.stopPropagation()}
                        >
                          {j.group}
                        </a>
                      )}
                      {j.abandoned_at && j.finished_at === null ? (
                        <span class="row-warning" data-testid="abandoned" title={j.poll_error ?? format.abandonReason(j.abandoned_reason)}>
                          ⊘ Not polled any more: {format.abandonReason(j.abandoned_reason)}
                        </span>
                      ) : (
                        j.poll_error && (
                          <span class="row-warning" title={j.poll_error}>
                            ⚠ {j.poll_error}
                          </span>
                        )
                      )}
                      {j.state === "failed" && j.error && (
                        <span class="row-error" title={j.error}>
                          {j.error}
                        </span>
                      )}
                    </td>
                    <td class="col-provider">{j.provider}</td>
                    <td class={t.finished ? "col-time" : "col-time running-time"} title={t.finished ? "from start to finish" : "since it was first seen"}>
                      {t.text}
                      <Usually job={j} now={now} />
                    </td>
                    <td class="col-end">
                      <SourceBadge source={j.terminal_source} />
                    </td>
                    <td class="col-updated muted" title={format.dateTime(j.updated_at)}>
                      {format.ago(j.updated_at, now)}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          <div class="table-foot">
            <span class="muted" data-testid="jobs-count">
              {loading
                ? "Loading…"
                : `Showing ${format.count(jobs.length)}${knownTotal !== null ? ` of ${format.count(Math.max(knownTotal, jobs.length))}` : ""} ${
                    jobs.length === 1 ? "job" : "jobs"
                  }`}
            </span>
            {cursor && (
              <button type="button" class="btn" onClick={loadMore} disabled={loadingMore} data-testid="load-more">
                {loadingMore ? "Loading…" : `Load ${PAGE} more`}
              </button>
            )}
          </div>
        </div>
      )}
    </section>
  );
}
