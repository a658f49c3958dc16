// Metrics: the contract's counters, what they mean, and how they moved hour by hour; SLA
// breaches per week and the push/pull share of completions.

import { useEffect, useRef, useState } from "preact/hooks";

import { errorText, get } from "../api";
import * as format from "../format";
import type { Metrics as MetricsT } from "../generated/Metrics";
import type { MetricsHistory } from "../generated/MetricsHistory";
import { metricWarnings, providerWarnings, pushPullShare, recent, slaByWeek, unknownValueLines, unknownValueWarning, watchSummary } from "../insights";
import { metrics as metricsStore } from "../live";
import { useStore } from "../store";
import { HourlyChart, type Line } from "./Chart";
import { Notice } from "./common";

const WINDOWS = [
  { hours: 24, label: "24 h" },
  { hours: 24 * 7, label: "7 days" },
  { hours: 24 * 30, label: "30 days" },
];

/** Each series' colour: a custom property of styles.css, set for the light and the dark theme. */
const COLORS = {
  deliveries: "--series-deliveries",
  duplicates: "--series-duplicates",
  stale: "--series-stale",
  rejected: "--series-rejected",
  bad: "--series-bad",
  rescues: "--series-rescues",
  stuck: "--series-stuck",
  cancels: "--series-cancels",
  applied: "--series-applied",
} as const;

interface Tile {
  key: keyof MetricsT;
  label: string;
  hint: string;
  /** Should stay at 0: shown in warning colours when not. */
  zero?: boolean;
}

const TILES: Tile[] = [
  { key: "deliveries_total", label: "Deliveries", hint: "webhook requests received: applied + duplicates + stale + rejected + ignored + bad signatures" },
  { key: "applied", label: "Applied", hint: "events that moved a job forward" },
  { key: "duplicates", label: "Duplicates", hint: "deliveries seen before: answered 200, ignored" },
  { key: "stale", label: "Stale", hint: "older than what was known: answered 200, ignored" },
  { key: "rejected", label: "Rejected", hint: "signed but unreadable: kept for inspection" },
  { key: "ignored", label: "Ignored", hint: "signed events of a kind NeverMiss does not act on: answered 200" },
  { key: "bad_signatures", label: "Bad signatures", hint: "refused with 401; see Refused for why", zero: true },
  { key: "reconcile_passes", label: "Reconcile passes", hint: "polling rounds over unfinished jobs" },
  {
    key: "reconcile_rescues",
    label: "Reconcile rescues",
    hint: "should stay at 0: jobs whose webhook was expected but only polling found their end; when it climbs, webhooks are failing quietly",
    zero: true,
  },
  {
    key: "poll_only_completions",
    label: "Finished by polling",
    hint: "jobs that send no webhook (Anthropic batches, fal jobs, a provider without a webhook secret): polling is how they end",
  },
  { key: "reconcile_errors", label: "Reconcile errors", hint: "polls that failed (network, provider errors)" },
  { key: "stuck_alerts", label: "Stuck alerts", hint: "jobs unfinished past the stuck threshold" },
  { key: "slow_alerts", label: "Slower than usual", hint: "jobs running past 1.5 × the 95th percentile of their kind's last durations" },
  { key: "jobs_discovered", label: "Discovered", hint: "jobs first found by listing a provider's jobs (Settings: discover jobs)" },
  { key: "cancel_requests", label: "Cancel requests", hint: "cancels asked of a provider (accepted or refused), each on its job's timeline" },
  { key: "notifications_enqueued", label: "Notifications", hint: "one per finished job" },
  { key: "notifications_delivered", label: "Notified", hint: "shown on the desktop" },
];

/** The counters charted alone, hour by hour, as bars. */
const COUNTER_CHARTS = [
  { counter: "reconcile_rescues", title: "Reconcile rescues", label: "rescues", color: COLORS.rescues, testId: "chart-rescues",
    explain: "Jobs whose end was learned only by polling. Should stay at 0; when it climbs, webhooks are failing quietly." },
  { counter: "bad_signatures", title: "Bad signatures", label: "bad signatures", color: COLORS.bad, testId: "chart-bad-signatures",
    explain: "Deliveries refused for a wrong or missing signature. Also 0 when all is well." },
  { counter: "stuck_alerts", title: "Stuck alerts", label: "stuck alerts", color: COLORS.stuck, testId: "chart-stuck",
    explain: "Jobs still unfinished after the stuck threshold (Settings)." },
  { counter: "cancel_requests", title: "Cancel requests", label: "cancel requests", color: COLORS.cancels, testId: "chart-cancels",
    explain: "Cancels asked of a provider, accepted or refused (each is on its job's timeline)." },
];

export function Metrics() {
  const metrics = useStore(metricsStore);
  const [hours, setHours] = useState(24);
  const [history, setHistory] = useState<MetricsHistory | null>(null);
  const [error, setError] = useState("");
  const lastLoad = useRef(0);

  const loadHistory = async (h: number) => {
    lastLoad.current = Date.now();
    try {
      setHistory(await get<MetricsHistory>(`/api/metrics/history?hours=${h}`));
      setError("");
    } catch (e) {
      setError(errorText(e));
    }
  };

  useEffect(() => {
    void loadHistory(hours);
  }, [hours]);

  // New counters arrive with each metrics snapshot; the hourly history follows, at most every 5 s.
  useEffect(() => {
    if (!metrics) return;
    const wait = Math.max(0, 5000 - (Date.now() - lastLoad.current));
    const t = setTimeout(() => void loadHistory(hours), wait);
    return () => clearTimeout(t);
  }, [metrics]);

  if (!metrics) {
    return (
      <section class="screen metrics">
        <h1 tabIndex={-1}>Metrics</h1>
        <p class="muted">Loading…</p>
      </section>
    );
  }

  const unknown = unknownValueWarning(metrics);
  const warnings = [...metricWarnings(metrics, history), ...providerWarnings(metrics), ...(unknown ? [unknown] : [])];
  const unknownLines = unknownValueLines(metrics);
  const summary = watchSummary(metrics);
  const weeks = slaByWeek(metrics.completions_by_day);
  const share = pushPullShare(metrics.completions_by_day);
  const series = (name: string) => history?.series[name] ?? history?.hours.map(() => 0) ?? [];
  const hoursX = history?.hours ?? [];
  const line = (label: string, name: string, color: Line["color"], bars = false): Line => ({ label, values: series(name), color, bars });

  return (
    <section class="screen metrics" data-testid="metrics-screen">
      <h1 tabIndex={-1}>Metrics</h1>
      <div class={`watch-summary ${summary.ok ? "watch-ok" : "watch-problems"}`} data-testid="watch-summary" role="status">
        <strong>{summary.ok ? "✓" : "⚠"} {summary.headline}</strong>
        {summary.problems.length > 0 && (
          <ul>
            {summary.problems.map((p) => (
              <li>{p}</li>
            ))}
          </ul>
        )}
      </div>
      {warnings.map((w) => (
        <Notice level={w.level} title={w.title} testId={`warning-${w.id}`}>
          {w.text}
        </Notice>
      ))}

      <div class="tiles">
        {TILES.map((t) => {
          const value = metrics[t.key] as number;
          const alarming = t.zero && value > 0;
          return (
            <div class={`tile ${alarming ? "tile-alarm" : ""}`} data-metric={t.key} title={t.hint}>
              <div class="tile-value">{format.count(value)}</div>
              <div class="tile-label">
                {t.label}
                {alarming && <span class="tile-flag"> · ⚠ should be 0</span>}
              </div>
              <div class="tile-hint">{t.hint}</div>
            </div>
          );
        })}
      </div>
      <p class="muted small">
        Counters since this data dir was created.
        {metrics.last_pass
          ? ` Last reconcile pass ${format.ago(metrics.last_pass.started_at)}: checked ${metrics.last_pass.checked}, applied ${metrics.last_pass.applied}, rescued ${metrics.last_pass.rescues}, ${metrics.last_pass.errors} errors, in ${format.duration(metrics.last_pass.duration_ms)}.`
          : " No reconcile pass yet."}
        {metrics.notifications_pending > 0 && ` ${metrics.notifications_pending} notifications waiting to be shown.`}
        {metrics.jobs_not_found > 0 && ` ${metrics.jobs_not_found} unfinished jobs are unknown to their provider (404).`}
        {metrics.jobs_abandoned > 0 && ` ${metrics.jobs_abandoned} unfinished jobs are not polled any more (abandoned: they can never be polled; a webhook still finishes them).`}
      </p>
      {unknownLines.length > 0 && (
        <div class="card" data-testid="unknown-values">
          <h2>Values NeverMiss does not know</h2>
          <ul>
            {unknownLines.map((line) => (
              <li>{line}</li>
            ))}
          </ul>
        </div>
      )}

      <div class="section-head">
        <h2>Over time</h2>
        <div class="segmented" role="group" aria-label="Time window">
          {WINDOWS.map((w) => (
            <button type="button" class={w.hours === hours ? "active" : ""} aria-pressed={w.hours === hours} onClick={() => setHours(w.hours)}>
              {w.label}
            </button>
          ))}
        </div>
      </div>
      {error && <Notice level="error" title="Cannot load the history">{error}</Notice>}
      {history && (
        <div class="charts">
          <div class="card span-all">
            <h3>
              Deliveries per hour <span class="muted small">({format.count(recent(history, "deliveries_total", hours))} in this window)</span>
            </h3>
            <HourlyChart
              testId="chart-deliveries"
              hours={hoursX}
              lines={[
                line("deliveries", "deliveries_total", COLORS.deliveries),
                line("duplicates", "duplicates", COLORS.duplicates),
                line("stale", "stale", COLORS.stale),
                line("rejected", "rejected", COLORS.rejected),
              ]}
            />
          </div>
          {COUNTER_CHARTS.map((c) => (
            <div class="card" key={c.counter} data-testid={`${c.testId}-card`}>
              <h3>
                {c.title} <span class="muted small">({format.count(recent(history, c.counter, hours))} in this window)</span>
              </h3>
              <p class="explain">{c.explain}</p>
              <HourlyChart testId={c.testId} hours={hoursX} lines={[line(c.label, c.counter, c.color, true)]} height={120} />
            </div>
          ))}
        </div>
      )}

      <div class="charts two">
        <div class="card" data-testid="sla-weeks">
          <h3>SLA breaches per week</h3>
          <p class="explain">
            Jobs that took longer than the SLA (Settings), from the provider's own start time (else from when NeverMiss first heard of
            them) to finished. Jobs first seen already finished with no start time are not measured.
          </p>
          {weeks.length === 0 ? (
            <p class="muted">No finished jobs yet.</p>
          ) : (
            <table class="bars">
              <tbody>
                {weeks.map((w) => {
                  const max = Math.max(...weeks.map((x) => x.finished), 1);
                  return (
                    <tr>
                      <th>week of {w.week}</th>
                      <td class="bar-cell">
                        <div class="bar">
                          <span class="bar-ok" style={{ width: `${(w.withinSla / max) * 100}%` }} />
                          <span class="bar-bad" style={{ width: `${(w.breaches / max) * 100}%` }} />
                        </div>
                      </td>
                      <td class="num">
                        <b class={w.breaches ? "bad-text" : ""}>{format.count(w.breaches)}</b> of {format.count(w.finished)}
                        {w.withoutStart > 0 && <span class="muted"> ({format.count(w.withoutStart)} not measured)</span>}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          )}
        </div>
        <div class="card" data-testid="push-pull">
          <h3>Push versus pull</h3>
          <p class="explain">How finished jobs were learned over the last 14 days: by webhook (push) or only by polling (pull).</p>
          {share.pushPercent === null ? (
            <p class="muted">No finished jobs yet.</p>
          ) : (
            <div>
              <div class="bar big">
                <span class="bar-push" style={{ width: `${share.pushPercent}%` }} />
                <span class="bar-pull" style={{ width: `${100 - share.pushPercent}%` }} />
              </div>
              <p>
                <span class="source source-push">⇣ push</span> {format.count(share.push)} ({share.pushPercent}%) ·{" "}
                <span class="source source-pull">↻ pull</span> {format.count(share.pull)} ({Math.round((100 - share.pushPercent) * 10) / 10}%)
              </p>
            </div>
          )}
        </div>
      </div>
    </section>
  );
}
