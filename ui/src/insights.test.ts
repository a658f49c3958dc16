import { describe, expect, it } from "vitest";

import type { Metrics } from "./generated/Metrics";
import type { MetricsHistory } from "./generated/MetricsHistory";
import {
  metricWarnings,
  notificationWarning,
  providerWarnings,
  pushPullShare,
  recent,
  slaByWeek,
  unknownValueLines,
  unknownValueWarning,
  watchSummary,
  weekOf,
} from "./insights";

function metrics(over: Partial<Metrics> = {}): Metrics {
  return {
    deliveries_total: 0, applied: 0, duplicates: 0, stale: 0, bad_signatures: 0, rejected: 0, ignored: 0, reconcile_passes: 0,
    reconcile_rescues: 0, reconcile_errors: 0, stuck_alerts: 0, slow_alerts: 0, notifications_enqueued: 0, notifications_delivered: 0,
    unconfigured_deliveries: 0, jobs_discovered: 0, cancel_requests: 0, poll_only_completions: 0, notifications_pending: 0, jobs_by_state: {}, last_reconcile_at: null, jobs_not_found: 0, jobs_abandoned: 0,
    last_pass: null, completions_by_day: [], providers: {}, failing_channels: {}, unknown_values: [],
    ...over,
  };
}

function history(series: Record<string, number[]>): MetricsHistory {
  const n = Object.values(series)[0]?.length ?? 0;
  return { hours: Array.from({ length: n }, (_, i) => i * 3600), series };
}

describe("warnings", () => {
  it("says nothing when rescues and bad signatures stay at 0", () => {
    expect(metricWarnings(metrics({ deliveries_total: 500 }), history({ deliveries_total: [1, 2] }))).toEqual([]);
  });

  it("warns when rescues climb in the last day, with the plain explanation", () => {
    const w = metricWarnings(metrics({ reconcile_rescues: 9 }), history({ reconcile_rescues: [0, 2, 1] }));
    expect(w.map((x) => x.id)).toEqual(["rescues"]);
    expect(w[0]!.title).toContain("3 jobs");
    expect(w[0]!.text).toContain("should stay at 0; when it climbs, webhooks are failing quietly");
  });

  it("says that jobs which send no webhook are counted apart, and never warns for them", () => {
    const w = metricWarnings(metrics({ reconcile_rescues: 2, jobs_discovered: 4 }), null);
    expect(w[0]!.text).toContain("counted apart");
    expect(metricWarnings(metrics({ poll_only_completions: 40 }), null)).toEqual([]);
  });

  it("does not warn for rescues older than a day", () => {
    const old = [5, ...Array(24).fill(0)];
    expect(metricWarnings(metrics({ reconcile_rescues: 5 }), history({ reconcile_rescues: old }))).toEqual([]);
  });

  it("warns for bad signatures, from totals before the history has loaded", () => {
    expect(metricWarnings(metrics({ bad_signatures: 1 }), null).map((x) => x.id)).toEqual(["bad_signatures"]);
  });

  it("warns for each provider whose jobs are not polled: a refused key, a rate limit, nothing set up", () => {
    const m = metrics({
      providers: {
        openai: { status: "misconfigured", message: "401 from the API", since: "", paused_until: null },
        replicate: { status: "rate_limited", message: null, since: "", paused_until: null },
        generic: { status: "ok", message: null, since: "", paused_until: null },
        anthropic: { status: "not_configured", message: null, since: "", paused_until: null },
      },
    });
    const w = providerWarnings(m);
    expect(w.map((x) => [x.id, x.level])).toEqual([
      ["provider:openai", "error"],
      ["provider:replicate", "warn"],
      ["provider:anthropic", "error"],
    ]);
    expect(w[2]!.title).toBe("anthropic: its jobs cannot be polled (not set up)");
    expect(w[2]!.text).toContain("A webhook still ends its jobs");
  });

  it("sums the recent hours of a series", () => {
    expect(recent(history({ a: [1, 2, 3, 4] }), "a", 2)).toBe(7);
    expect(recent(history({ a: [1] }), "missing", 2)).toBe(0);
    expect(recent(null, "a", 2)).toBe(0);
  });
});

describe("SLA and push/pull", () => {
  it("groups days into ISO weeks starting on Monday", () => {
    expect(weekOf("2026-11-30")).toBe("2026-11-30"); // a Monday
    expect(weekOf("2026-12-06")).toBe("2026-11-30"); // the Sunday after
    expect(weekOf("2026-11-29")).toBe("2026-11-23");
  });

  it("counts breaches per week", () => {
    const weeks = slaByWeek([
      { day: "2026-11-28", finished: 10, within_sla: 9, by_pull: 1, without_start: 0 },
      { day: "2026-11-30", finished: 4, within_sla: 4, by_pull: 0, without_start: 0 },
      { day: "2026-12-01", finished: 6, within_sla: 3, by_pull: 2, without_start: 1 },
    ]);
    expect(weeks).toEqual([
      { week: "2026-11-23", finished: 10, withinSla: 9, breaches: 1, withoutStart: 0, byPull: 1 },
      // One of the 6 on 2026-12-01 was first seen finished with no start: not a breach.
      { week: "2026-11-30", finished: 10, withinSla: 7, breaches: 2, withoutStart: 1, byPull: 2 },
    ]);
  });

  it("gives the push share of completions", () => {
    expect(pushPullShare([])).toEqual({ push: 0, pull: 0, pushPercent: null });
    expect(
      pushPullShare([
        { day: "d1", finished: 6, within_sla: 6, by_pull: 1, without_start: 0 },
        { day: "d2", finished: 2, within_sla: 2, by_pull: 1, without_start: 0 },
      ]),
    ).toEqual({ push: 6, pull: 2, pushPercent: 75 });
  });
});

describe("notification warning", () => {
  it("waits out the moment every finish is pending", () => {
    const m = metrics({ notifications_pending: 2 });
    expect(notificationWarning(m, 1_000, 5_000)).toBeNull();
    expect(notificationWarning(m, 1_000, 20_000)?.title).toBe("2 finished jobs are waiting to be notified");
    expect(notificationWarning(metrics(), 1_000, 20_000)).toBeNull();
    expect(notificationWarning(m, null, 20_000)).toBeNull();
  });
});

describe("values NeverMiss does not know", () => {
  it("says nothing when there are none", () => {
    expect(unknownValueWarning(metrics())).toBeNull();
    expect(unknownValueLines(metrics())).toEqual([]);
  });

  it("counts them all in one warning and lists each, most met first", () => {
    const m = metrics({
      unknown_values: [
        { provider: "openai", field: "batch.status", value: "paused", count: 1 },
        { provider: "anthropic", field: "session_event.stop_reason", value: "tool_budget", count: 2 },
      ],
    });
    expect(unknownValueWarning(m)!.title).toBe("3 values of a kind NeverMiss does not know");
    expect(unknownValueLines(m)).toEqual([
      `2 times: anthropic's session_event.stop_reason was "tool_budget"`,
      `1 time: openai's batch.status was "paused"`,
    ]);
  });
});

describe("the Metrics screen's first answer", () => {
  it("says all unfinished jobs are watched, or how many problems and which", () => {
    const states = { running: 10, queued: 1, unknown: 1, succeeded: 40 };
    expect(watchSummary(metrics({ jobs_by_state: states }))).toEqual({ ok: true, headline: "All 12 unfinished jobs are watched", problems: [] });
    expect(watchSummary(metrics({ jobs_by_state: { succeeded: 3 } })).headline).toBe("Nothing running: every job has ended");
    const bad = watchSummary(
      metrics({
        jobs_by_state: states,
        jobs_abandoned: 2,
        providers: { replicate: { status: "not_configured", message: null, since: "", paused_until: null } },
      }),
    );
    expect(bad.ok).toBe(false);
    expect(bad.headline).toBe("12 unfinished jobs, 2 problems");
    expect(bad.problems).toEqual(["replicate: its jobs cannot be polled (not set up)", "2 unfinished jobs are no longer polled (only a webhook ends them)"]);
  });
});
