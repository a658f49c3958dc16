// Small pieces every screen uses: badges, copy buttons, a ticking clock, notices.

import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";

import * as format from "../format";
import type { JobState } from "../generated/JobState";
import type { Outcome } from "../generated/Outcome";
import type { Source } from "../generated/Source";

/** A state as words: `needs_input` reads "needs input" (an agent session's run waits for the user);
 * `ended` is an end whose outcome is unknown (the provider no longer keeps the job). */
export function stateText(state: JobState): string {
  return state === "ended" ? "ended, outcome unknown" : state.replace(/_/g, " ");
}

export function StateBadge({ state }: { state: JobState }) {
  return (
    <span class={`badge state-${state}`} data-state={state}>
      {stateText(state)}
    </span>
  );
}

const OUTCOME_HINT: Record<Outcome, string> = {
  applied: "moved the job forward",
  duplicate: "a delivery seen before: answered 200, changed nothing",
  stale: "older than what was known: answered 200, changed nothing",
  rejected: "signed but unreadable: kept for inspection, changed nothing",
  ignored: "signed, of a kind NeverMiss does not act on: answered 200, changed nothing",
  requested: "a cancel asked of the provider, with its answer: the job's end comes by a poll or a webhook",
};

export function OutcomeBadge({ outcome }: { outcome: Outcome }) {
  return (
    <span class={`badge outcome-${outcome}`} data-outcome={outcome} title={OUTCOME_HINT[outcome]}>
      {outcome}
    </span>
  );
}

export function SourceBadge({ source }: { source: Source | null }) {
  if (!source) return <span class="muted">–</span>;
  return (
    <span
      class={`source source-${source}`}
      data-source={source}
      title={source === "push" ? "learned from a webhook" : "learned by polling the provider"}
    >
      {source === "push" ? "⇣ push" : "↻ pull"}
    </span>
  );
}

/** Copies text: the Clipboard API, else the older copy command (some webviews lack the first). */
export async function copyText(text: string): Promise<void> {
  try {
    await navigator.clipboard.writeText(text);
    return;
  } catch {
    // Fall through to the copy command.
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "offscreen";
  document.body.append(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("copy refused");
}

/** Copies `text`; says so for a moment. */
export function CopyButton({ text, label = "Copy", testId }: { text: string; label?: string; testId?: string }) {
  const [done, setDone] = useState<"" | "ok" | "failed">("");
  const copy = async (e: Event) => {
    e.preventDefault();
    e.stopPropagation();
    try {
      await copyText(text);
      setDone("ok");
    } catch {
      setDone("failed");
    }
    setTimeout(() => setDone(""), 1500);
  };
  return (
    <button type="button" class="btn small" onClick={copy} data-testid={testId} title={`Copy ${text}`}>
      {done === "ok" ? "Copied" : done === "failed" ? "Select and copy" : label}
    </button>
  );
}

/** The current time, refreshed every `ms`, for ages that should move on screen. */
export function useNow(ms: number): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

export function Notice({
  level,
  title,
  children,
  testId,
}: {
  level: "info" | "warn" | "error" | "ok";
  title?: string;
  children?: ComponentChildren;
  testId?: string;
}) {
  return (
    <div class={`notice notice-${level}`} data-testid={testId} role={level === "error" ? "alert" : "status"}>
      {title && <strong>{title}</strong>}
      {children && <div>{children}</div>}
    </div>
  );
}

/** "usually 4 min 12 s · ends in about 2 min" under a job's age (`format.usually`); nothing without history. */
export function Usually({ job, now }: { job: { expected_ms: number | null; created_at: string; finished_at: string | null }; now: number }) {
  const u = format.usually(job, now);
  if (!u) return null;
  return (
    <span class={`usually${u.over ? " over" : ""}`} data-testid="usually" title="how long a job of its kind usually takes (the median of the last ones)">
      {u.end ? `${u.text} · ${u.end}` : u.text}
    </span>
  );
}

export function Empty({ title, children, testId }: { title: string; children?: ComponentChildren; testId?: string }) {
  return (
    <div class="empty" data-testid={testId}>
      <h2>{title}</h2>
      {children}
    </div>
  );
}
