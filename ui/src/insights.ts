// What the numbers mean: warnings worth interrupting a busy day for, SLA breaches per week,
// and the share of completions that came by push or by pull.

import type { DailyCompletions } from "./generated/DailyCompletions";
import type { Metrics } from "./generated/Metrics";
import type { MetricsHistory } from "./generated/MetricsHistory";

export interface Warning {
  /** Stable id, also used by tests: `rescues`, `bad_signatures`, `provider:<name>`, ... */
  id: string;
  level: "warn" | "error";
  title: string;
  text: string;
}

/** The counter's total over the last `hours` hours of a history (0 when it has none). */
export function recent(history: MetricsHistory | null, name: string, hours: number): number {
  const values = history?.series[name];
  if (!values) return 0;
  return values.slice(-hours).reduce((a, b) => a + b, 0);
}

/** Provider health states that need the user: each leaves jobs unwatched or waiting. */
export const UNHEALTHY = new Set(["misconfigured", "rate_limited", "not_configured"]);

export function providerWarnings(metrics: Metrics | null): Warning[] {
  if (!metrics) return [];
  return Object.entries(metrics.providers)
    .filter(([, h]) => UNHEALTHY.has(h.status))
    .map(([name, h]) => ({
      id: `provider:${name}`,
      level: h.status === "rate_limited" ? "warn" : "error",
      title: providerProblem(name, h.status),
      text:
        (h.message ? `${h.message}.` : "") +
        (h.paused_until ? ` Polling resumes ${new Date(h.paused_until).toLocaleTimeString()}.` : "") +
        (h.status === "rate_limited" ? "" : " A webhook still ends its jobs; set it up in Settings, Providers."),
    }));
}

/** What a provider's polling health means for its jobs, in one line; null when they are polled. */
export function providerProblem(name: string, status: string): string {
  switch (status) {
    case "misconfigured":
      return `${name}: the API key was refused, so its jobs are not being polled`;
    case "rate_limited":
      return `${name}: rate limited by the provider, polling paused`;
    case "not_configured":
      return `${name}: its jobs cannot be polled (not set up)`;
    case "no_status_api":
      return `${name}: no status API, its jobs end by webhook only`;
    default:
      return "";
  }
}

/** The counters that should stay at 0, each a warning when it climbs: what one counts, and why it matters. */
const CLIMBING_COUNTERS = [
  { id: "rescues", counter: "reconcile_rescues", one: "job", many: "jobs", what: "finished without a webhook",
    text: "Polling caught them (reconcile rescues): their provider sends webhooks and the secret is set, yet none arrived. This should stay at 0; when it climbs, webhooks are failing quietly: check the webhook URL and the tunnel at the provider. (Jobs that send no webhook end by polling and are counted apart, as \"finished by polling\".)" },
  { id: "bad_signatures", counter: "bad_signatures", one: "delivery", many: "deliveries", what: "with a bad signature",
    text: "They were refused (401) and not stored. A sender has a different webhook secret than NeverMiss, or someone is probing the receiver." },
] as const;

/**
 * Warnings from the counters: rescues and bad signatures should stay at 0, so any in the last
 * day is worth a look ("climbing"); with no history yet, the totals decide.
 */
export function metricWarnings(metrics: Metrics | null, history: MetricsHistory | null): Warning[] {
  if (!metrics) return [];
  const out: Warning[] = [];
  for (const c of CLIMBING_COUNTERS) {
    const n = history ? recent(history, c.counter, 24) : metrics[c.counter];
    if (n > 0) {
      out.push({ id: c.id, level: "warn", title: `${n} ${n === 1 ? c.one : c.many} ${c.what} in the last 24 h`, text: c.text });
    }
  }
  if (metrics.unconfigured_deliveries > 0 && (!history || recent(history, "unconfigured_deliveries", 24) > 0)) {
    out.push({
      id: "unconfigured",
      level: "warn",
      title: "Deliveries arrive for a provider with no webhook secret",
      text: "They are answered 503 so the sender retries. Set the provider's webhook secret in Settings.",
    });
  }
  return out;
}

/**
 * The values of providers' fields NeverMiss does not know (a status, a stop reason), in words:
 * "3 times: anthropic's session_event.stop_reason was "paused"", most met first. Never a success:
 * such a job failed or stays running with the value shown.
 */
export function unknownValueLines(metrics: Metrics | null): string[] {
  const list = [...(metrics?.unknown_values ?? [])].sort((a, b) => b.count - a.count || a.provider.localeCompare(b.provider));
  return list.map((u) => `${u.count} ${u.count === 1 ? "time" : "times"}: ${u.provider}'s ${u.field} was "${u.value}"`);
}

/** One warning when some provider sent a value NeverMiss does not know, naming how many kinds. */
export function unknownValueWarning(metrics: Metrics | null): Warning | null {
  const list = metrics?.unknown_values ?? [];
  if (list.length === 0) return null;
  const total = list.reduce((n, u) => n + u.count, 0);
  return {
    id: "unknown-values",
    level: "warn",
    title: `${total} ${total === 1 ? "value" : "values"} of a kind NeverMiss does not know`,
    text:
      "A provider sent a status or a stop reason NeverMiss has no meaning for. Such a job is never taken for a success: " +
      "it failed, or stays running, with the value shown. Update NeverMiss; the list is below.",
  };
}

export interface WeekSla {
  /** Monday of the week, YYYY-MM-DD (UTC). */
  week: string;
  finished: number;
  withinSla: number;
  breaches: number;
  /** First seen already finished with no start time from the provider: not measured. */
  withoutStart: number;
  byPull: number;
}

/** The Monday (UTC) of the ISO week a YYYY-MM-DD day is in. */
export function weekOf(day: string): string {
  const d = new Date(`${day}T00:00:00Z`);
  const back = (d.getUTCDay() + 6) % 7;
  d.setUTCDate(d.getUTCDate() - back);
  return d.toISOString().slice(0, 10);
}

/** Completions per day, summed per week, oldest first. */
export function slaByWeek(days: DailyCompletions[]): WeekSla[] {
  const weeks = new Map<string, WeekSla>();
  for (const d of days) {
    const week = weekOf(d.day);
    const w = weeks.get(week) ?? { week, finished: 0, withinSla: 0, breaches: 0, withoutStart: 0, byPull: 0 };
    w.finished += d.finished;
    w.withinSla += d.within_sla;
    w.withoutStart += d.without_start;
    w.breaches += Math.max(0, d.finished - d.within_sla - d.without_start);
    w.byPull += d.by_pull;
    weeks.set(week, w);
  }
  return [...weeks.values()].sort((a, b) => a.week.localeCompare(b.week));
}

export interface Share {
  push: number;
  pull: number;
  /** Percent by push, 0..100, or null with no completions. */
  pushPercent: number | null;
}

export function pushPullShare(days: DailyCompletions[]): Share {
  const finished = days.reduce((a, d) => a + d.finished, 0);
  const pull = days.reduce((a, d) => a + d.by_pull, 0);
  const push = Math.max(0, finished - pull);
  return { push, pull, pushPercent: finished ? Math.round((push / finished) * 1000) / 10 : null };
}

/** How long notifications may wait before the UI says the notification service is not answering. */
export const NOTIFY_GRACE_MS = 15_000;

/**
 * Finished jobs whose notification has not gone out. A row is pending for a moment after every
 * finish, so this warns only once some have waited `NOTIFY_GRACE_MS` (`pendingSince` is when the
 * pending count was first seen above 0, or null).
 */
export function notificationWarning(metrics: Metrics | null, pendingSince: number | null, now: number): Warning | null {
  if (!metrics || metrics.notifications_pending === 0 || pendingSince === null || now - pendingSince < NOTIFY_GRACE_MS) return null;
  const n = metrics.notifications_pending;
  return {
    id: "notifications",
    level: "warn",
    title: `${n} finished ${n === 1 ? "job is" : "jobs are"} waiting to be notified`,
    text: "The desktop's notification service is not answering. NeverMiss keeps them and retries; nothing is lost.",
  };
}

/** The unfinished states: a job in one is what NeverMiss watches. */
const UNFINISHED = ["unknown", "queued", "running"];

/**
 * The Metrics screen's first answer: is anything not being watched? "All 12 unfinished jobs are
 * watched", or "12 unfinished jobs, 3 problems" with each problem in words (a provider whose jobs
 * are not polled, jobs polling gave up on, jobs their provider does not know, a failing channel).
 */
export function watchSummary(metrics: Metrics): { ok: boolean; headline: string; problems: string[] } {
  const unfinished = UNFINISHED.reduce((sum, state) => sum + (metrics.jobs_by_state[state] ?? 0), 0);
  const jobs = unfinished === 1 ? "1 unfinished job" : `${unfinished} unfinished jobs`;
  const problems: string[] = [];
  for (const [name, h] of Object.entries(metrics.providers)) {
    const what = providerProblem(name, h.status);
    if (what && h.status !== "rate_limited") problems.push(what);
  }
  if (metrics.jobs_abandoned > 0) problems.push(`${metrics.jobs_abandoned} unfinished ${metrics.jobs_abandoned === 1 ? "job is" : "jobs are"} no longer polled (only a webhook ends them)`);
  if (metrics.jobs_not_found > 0) problems.push(`${metrics.jobs_not_found} unfinished ${metrics.jobs_not_found === 1 ? "job is" : "jobs are"} unknown to their provider (404)`);
  for (const name of Object.keys(metrics.failing_channels)) problems.push(`the ${name} channel is failing: its notifications wait`);
  if (problems.length === 0) {
    return { ok: true, headline: unfinished === 0 ? "Nothing running: every job has ended" : `All ${jobs} are watched`, problems };
  }
  return { ok: false, headline: `${jobs}, ${problems.length === 1 ? "1 problem" : `${problems.length} problems`}`, problems };
}
