// The live connection: /api/events read with fetch (EventSource cannot send the token), kept
// open with reconnects. Job changes and metrics snapshots go to whoever listens; after a
// reconnect or a `resync` (the client fell behind), listeners reload what they show.

import { ApiError, call, get } from "./api";
import type { Change } from "./generated/Change";
import type { Info } from "./generated/Info";
import type { Job } from "./generated/Job";
import type { Metrics } from "./generated/Metrics";
import type { TunnelState } from "./generated/TunnelState";
import { readEventStream } from "./sse";
import { store } from "./store";

export type Connection = "connecting" | "live" | "reconnecting";

export const connection = store<Connection>("connecting");
export const metrics = store<Metrics | null>(null);
export const info = store<Info | null>(null);
/** The tunnel's state (GET /api/tunnel), polled: it has no event of its own. */
export const tunnel = store<TunnelState | null>(null);

const jobWatchers = new Set<(job: Job) => void>();
const resyncWatchers = new Set<() => void>();

/** Called with every job change. Returns the unsubscribe function. */
export function onJob(f: (job: Job) => void): () => void {
  jobWatchers.add(f);
  return () => jobWatchers.delete(f);
}

/** Called when what is shown may have missed changes (a reconnect, or a `resync`). */
export function onResync(f: () => void): () => void {
  resyncWatchers.add(f);
  return () => resyncWatchers.delete(f);
}

function resync(): void {
  for (const f of [...resyncWatchers]) f();
}

export async function refreshMetrics(): Promise<void> {
  metrics.set(await get<Metrics>("/api/metrics"));
}

export async function refreshInfo(): Promise<void> {
  info.set(await get<Info>("/api/info"));
}

export async function refreshTunnel(): Promise<void> {
  try {
    tunnel.set(await get<TunnelState>("/api/tunnel"));
  } catch {
    // Not answering now: the last known state stays.
  }
}

function handle(event: string, data: string): void {
  if (event === "untracked") {
    // A job no longer watched: what lists it reloads.
    resync();
  } else if (event === "job" || event === "metrics") {
    const change = JSON.parse(data) as Change;
    if (change.type === "job") for (const f of [...jobWatchers]) f(change.job);
    else if (change.type === "metrics") metrics.set(change.metrics);
  } else if (event === "resync") {
    void refreshMetrics().catch(() => {});
    resync();
  }
}

let started = false;
let tunnelTimer: ReturnType<typeof setInterval> | undefined;

/** Opens the stream and keeps it open for the life of the page. */
export function startLive(): void {
  if (started) return;
  started = true;
  tunnelTimer ??= setInterval(() => void refreshTunnel(), 15_000);
  void (async () => {
    let delay = 500;
    let first = true;
    for (;;) {
      try {
        const response = await call("/api/events", { headers: { Accept: "text/event-stream" } });
        if (!response.body) throw new Error("no stream");
        connection.set("live");
        delay = 500;
        // Whatever happened while the stream was down is reloaded now.
        await Promise.all([refreshMetrics(), refreshInfo(), refreshTunnel()]).catch(() => {});
        if (!first) resync();
        first = false;
        await readEventStream(response.body, (e) => handle(e.event, e.data));
      } catch (e) {
        // A refused token is not retried: the app asks for the token, and starts again with it.
        if (e instanceof ApiError && e.status === 401) {
          started = false;
          connection.set("connecting");
          return;
        }
        // Dropped: try again shortly.
      }
      connection.set("reconnecting");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 10_000);
    }
  })();
}
