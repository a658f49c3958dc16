// How times, durations and counts read on screen.

/** "42 s", "3 min 12 s", "2 h 5 min", "3 d 4 h": two units at most, for a glance. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "–";
  const s = Math.floor(ms / 1000);
  if (s < 1) return `${Math.max(0, Math.round(ms))} ms`;
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 24) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}

/** "just now", "5 min ago", "3 h ago", "2 d ago". */
export function ago(iso: string | null | undefined, now: number = Date.now()): string {
  if (!iso) return "–";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "–";
  const ms = now - t;
  if (ms < 10_000) return "just now";
  return `${duration(ms).split(" ").slice(0, 2).join(" ")} ago`;
}

/** When a job started: the provider's own start when it said one, else when NeverMiss first heard of it. */
export function jobStart(job: { created_at: string; started_at?: string | null }): number {
  const started = job.started_at ? Date.parse(job.started_at) : NaN;
  return Number.isNaN(started) ? Date.parse(job.created_at) : started;
}

/** A job's age while it runs, or how long it took once finished (from its provider's start). */
export function jobTime(
  job: { created_at: string; started_at?: string | null; finished_at: string | null; updated_at: string },
  now: number = Date.now(),
): { text: string; finished: boolean } {
  const start = jobStart(job);
  const coarse = (ms: number) => (ms < 1000 ? "<1 s" : duration(ms));
  if (job.finished_at) {
    const end = Date.parse(job.finished_at);
    return { text: coarse(Math.max(0, end - start)), finished: true };
  }
  return { text: coarse(Math.max(0, now - start)), finished: false };
}

/**
 * What a job of its kind usually takes, from the kind's history (`expected_ms`): "usually 4 min
 * 12 s", and for a running job its expected end, "ends in about 2 min", or how far past it it is,
 * "3 min over" (counted from when it was first seen, as its age is). Null without history.
 */
export function usually(
  job: { expected_ms: number | null; created_at: string; started_at?: string | null; finished_at: string | null },
  now: number = Date.now(),
): { text: string; end: string | null; over: boolean } | null {
  if (job.expected_ms === null || job.expected_ms === undefined || !Number.isFinite(job.expected_ms)) return null;
  const text = `usually ${duration(job.expected_ms)}`;
  const start = jobStart(job);
  if (job.finished_at || Number.isNaN(start)) return { text, end: null, over: false };
  const left = start + job.expected_ms - now;
  if (left >= 0) return { text, end: left < 1000 ? "ends any moment" : `ends in about ${duration(left)}`, over: false };
  return { text, end: `${duration(-left)} over`, over: true };
}

/** Local date and time, to the second: "2026-11-30 10:04:05". */
export function dateTime(iso: string | null | undefined): string {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** 12345 → "12,345". */
/** A group's progress: "18 of 20 done · 2 failed" (failures and input requests named). */
export function groupProgress(g: { total: number; running: number; by_state: Record<string, number | undefined> }): string {
  const done = g.total - g.running;
  const parts = [g.running === 0 ? `all ${count(g.total)} done` : `${count(done)} of ${count(g.total)} done`];
  const failed = g.by_state.failed ?? 0;
  const waiting = g.by_state.needs_input ?? 0;
  const canceled = g.by_state.canceled ?? 0;
  const unobserved = g.by_state.ended ?? 0;
  if (failed) parts.push(`${count(failed)} failed`);
  if (waiting) parts.push(`${count(waiting)} need input`);
  if (unobserved) parts.push(`${count(unobserved)} ended, outcome unknown`);
  if (canceled) parts.push(`${count(canceled)} canceled`);
  return parts.join(" · ");
}

export function count(n: number | null | undefined): string {
  return (n ?? 0).toLocaleString("en-US");
}

/** Seconds as a plain phrase for settings hints: 90 → "1 min 30 s". */
export function seconds(s: number): string {
  return duration(s * 1000);
}

/** Why polling gave up on a job, in words. */
export function abandonReason(reason: string | null | undefined): string {
  switch (reason) {
    case "not_found":
      return "the provider has answered 404 (unknown job) at every poll";
    case "unpollable":
      return "this job cannot be polled";
    case "no_status_api":
      return "its provider has no status API";
    default:
      return "it can never be polled";
  }
}

/** "stuck_alerts" → "Stuck alerts". */
export function label(key: string): string {
  const t = key.replaceAll("_", " ");
  return t.charAt(0).toUpperCase() + t.slice(1);
}

/** Characters that change how the text around them reads instead of being text: controls,
 * bidirectional marks, embeddings, overrides and isolates, line and paragraph separators. */
const LAYOUT_CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;

/** Text a provider or sender wrote, shown as it is rather than obeyed: each layout control
 * becomes a visible `[U+202E]`, so a right-to-left override cannot make "evil" read "live" (the
 * engine's `plain_text` module does the same for the log, e-mail and notifications). */
export function visible(text: string): string {
  return text.replace(LAYOUT_CONTROLS, (c) => `[U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}]`);
}
