// Screens live in the URL fragment (`#/jobs`, `#/jobs/generic/job-42`, `#/metrics`, ...), which
// the server never sees; so does the API token on first load (`#token=...`), or the one-time
// code `nevermiss open` hands over instead (`#code=...`), each taken out of the address at once.

export type Route =
  | { screen: "jobs"; state: string; provider: string; q: string; group: string }
  /** `ask: "cancel"`: opened from a notification's "Cancel" button, the cancel's question shown at once. */
  | { screen: "job"; provider: string; jobId: string; ask?: "cancel" }
  | { screen: "metrics" }
  | { screen: "settings" }
  | { screen: "refused" }
  | { screen: "start" };

export function parseRoute(hash: string): Route {
  const h = hash.replace(/^#/, "");
  const [path = "", query = ""] = h.split("?", 2) as [string, string?];
  const params = new URLSearchParams(query);
  const parts = path.split("/").filter(Boolean).map(safeDecode);
  switch (parts[0]) {
    case "metrics":
      return { screen: "metrics" };
    case "settings":
      return { screen: "settings" };
    case "refused":
      return { screen: "refused" };
    case "start":
      return { screen: "start" };
    case "jobs":
      if (parts.length >= 3) {
        const job = { screen: "job" as const, provider: parts[1]!, jobId: parts.slice(2).join("/") };
        return params.get("ask") === "cancel" ? { ...job, ask: "cancel" } : job;
      }
      break;
  }
  return {
    screen: "jobs",
    state: params.get("state") ?? "",
    provider: params.get("provider") ?? "",
    q: params.get("q") ?? "",
    group: params.get("group") ?? "",
  };
}

export function formatRoute(route: Route): string {
  switch (route.screen) {
    case "job":
      return `#/jobs/${encodeURIComponent(route.provider)}/${encodeURIComponent(route.jobId)}${route.ask ? `?ask=${route.ask}` : ""}`;
    case "jobs": {
      const params = new URLSearchParams();
      if (route.state) params.set("state", route.state);
      if (route.provider) params.set("provider", route.provider);
      if (route.q) params.set("q", route.q);
      if (route.group) params.set("group", route.group);
      const query = params.toString();
      return query ? `#/jobs?${query}` : "#/jobs";
    }
    default:
      return `#/${route.screen}`;
  }
}

/**
 * Which screen a route shows, as one string: a change of it is a navigation (the focus moves to
 * the new screen's heading); a change of the Jobs screen's filters, or of the cancel question
 * of the same job, is not.
 */
export function screenKey(route: Route): string {
  return route.screen === "job" ? `job:${route.provider}/${route.jobId}` : route.screen;
}

/** The address of a screen other than a job's, the Jobs screen without filters. */
export function screenHref(screen: Exclude<Route["screen"], "job">): string {
  return formatRoute(screen === "jobs" ? { screen, state: "", provider: "", q: "", group: "" } : { screen });
}

export function jobHref(provider: string, jobId: string): string {
  return formatRoute({ screen: "job", provider, jobId });
}

/**
 * Takes the token out of a first-load fragment: `#token=T` or `#token=T&view=/jobs/p/id`.
 * Returns the token (if any) and the fragment to show instead.
 */
export function takeToken(hash: string): { token: string | null; hash: string } {
  const h = hash.replace(/^#/, "");
  if (!/(^|&)token=/.test(h)) return { token: null, hash };
  const params = new URLSearchParams(h);
  const token = params.get("token");
  const view = params.get("view");
  return { token: token || null, hash: view ? `#${view.startsWith("/") ? view : `/${view}`}` : "#/jobs" };
}

/**
 * Takes a one-time code out of a fragment (`#code=C`, as `nevermiss open` opens it): the code
 * (if any) and the fragment to show instead.
 */
export function takeCode(hash: string): { code: string | null; hash: string } {
  const h = hash.replace(/^#/, "");
  // A screen's own query (`#/jobs?...&code=...`) is not a hand-over.
  if (h.startsWith("/") || !/(^|&)code=/.test(h)) return { code: null, hash };
  const params = new URLSearchParams(h);
  const view = params.get("view");
  return { code: params.get("code") || null, hash: view ? `#${view.startsWith("/") ? view : `/${view}`}` : "#/jobs" };
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
