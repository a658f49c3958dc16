// The admin API: every call carries the token as a Bearer header. The token came in the URL
// fragment (never sent to the server) and is kept in sessionStorage for reloads of this tab.

import type { ErrorBody } from "./generated/ErrorBody";
import { store } from "./store";

const TOKEN_KEY = "nevermiss-token";

let token: string | null = null;

/** Called when a token is handed over in the address, so the app can show itself. */
let onToken: () => void = () => {};
export function whenToken(f: () => void): void {
  onToken = f;
}

export function setToken(t: string | null): void {
  token = t;
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage may be off (private mode): the token then lives for this page only.
  }
}

export function storedToken(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/**
 * Takes a token handed over in the address (`#token=...`, see route.ts), keeps it, and takes it
 * out of the address bar and the history. Whether there was one.
 */
export function adoptTokenFromAddress(take: (hash: string) => { token: string | null; hash: string }): boolean {
  const { token: t, hash } = take(location.hash);
  if (!t) return false;
  setToken(t);
  history.replaceState(null, "", `${location.pathname}${location.search}${hash}`);
  onToken();
  return true;
}

/**
 * Takes a one-time code handed over in the address (`#code=...`, see route.ts) out of the address
 * bar and the history, and exchanges it for the token (`POST /api/ui-codes/redeem`, which needs
 * no token). Whether there was a code; a code refused (spent, expired) leaves the token as it was.
 */
/** Whether the one-time code in the address was refused (spent, or older than a minute). */
export const codeRefused = store<boolean>(false);

export function adoptCodeFromAddress(take: (hash: string) => { code: string | null; hash: string }): boolean {
  const { code, hash } = take(location.hash);
  if (!code) return false;
  history.replaceState(null, "", `${location.pathname}${location.search}${hash}`);
  void fetch("/api/ui-codes/redeem", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code }),
    cache: "no-store",
  })
    .then(async (response) => {
      if (!response.ok) {
        // Spent or expired: the page says so, and what to run for a new one.
        codeRefused.set(true);
        return;
      }
      const body = (await response.json()) as { token?: string };
      if (!body.token) return;
      setToken(body.token);
      onToken();
    })
    .catch(() => {
      // NeverMiss is not answering: the app says so on its first call.
    });
  return true;
}

export function hasToken(): boolean {
  return !!token;
}

/** An answer other than 2xx: its status, the server's one-line reason and per-field reasons. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly fields: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Called when the API says the token is wrong, so the app can ask for it again. */
let onUnauthorized: () => void = () => {};
export function whenUnauthorized(f: () => void): void {
  onUnauthorized = f;
}

export async function call(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (token) headers.set("Authorization", `Bearer ${token}`);
  if (init.body && !headers.has("Content-Type")) headers.set("Content-Type", "application/json");
  let response: Response;
  try {
    response = await fetch(path, { ...init, headers, cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, "NeverMiss is not answering (is it still running?)");
  }
  if (response.ok) return response;
  let body: Partial<ErrorBody> = {};
  try {
    body = await response.json();
  } catch {
    // Not JSON: the status says enough.
  }
  if (response.status === 401) onUnauthorized();
  throw new ApiError(response.status, body.error ?? `${response.status} ${response.statusText}`, body.errors ?? {});
}

export async function get<T>(path: string, signal?: AbortSignal): Promise<T> {
  const init: RequestInit = signal ? { signal } : {};
  return (await call(path, init)).json() as Promise<T>;
}

export async function send<T>(method: "POST" | "PUT" | "DELETE", path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method };
  if (body !== undefined) init.body = JSON.stringify(body);
  return (await call(path, init)).json() as Promise<T>;
}

/** `/api/jobs/{provider}/{job_id}` with each part escaped. */
export function jobPath(provider: string, jobId: string): string {
  return `/api/jobs/${encodeURIComponent(provider)}/${encodeURIComponent(jobId)}`;
}

export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The line a form shows when a save was refused field by field: nothing was saved. */
export const NOTHING_SAVED = "Nothing was saved: fix the marked fields.";

/** What a failed save shows: the API's per-field errors, to mark the fields (none when the
 * failure is not about a field), and one line saying what happened. */
export function saveRefusal(e: unknown): { fields: Record<string, string>; message: string } {
  if (e instanceof ApiError && Object.keys(e.fields).length) return { fields: e.fields, message: NOTHING_SAVED };
  return { fields: {}, message: errorText(e) };
}
