// The Jobs screen's list: one filtered page (or several, after "Load more"), kept live by job
// changes from the event stream without reloading it.

import type { Job } from "./generated/Job";

export interface Filters {
  state: string;
  provider: string;
  q: string;
  /** The jobs of one group. */
  group: string;
}

export const jobKey = (j: { provider: string; job_id: string }): string => `${j.provider}\u0000${j.job_id}`;

/** Whether a job belongs in a list with these filters (as the server's query decides it). */
export function matches(job: Job, f: Filters): boolean {
  if (f.state && job.state !== f.state) return false;
  if (f.provider && job.provider !== f.provider) return false;
  if (f.group && job.group !== f.group) return false;
  const q = fold(f.q.trim());
  if (q) {
    const found = [job.job_id, job.label ?? "", job.group ?? ""].some((text) => fold(text).includes(q));
    if (!found) return false;
  }
  return true;
}

/**
 * The server's search fold (the store's `fold`): Unicode's default lowercase, then "ß" as "ss"
 * and the final sigma as a sigma, so that a job found by the server's search is matched here too.
 */
export function fold(text: string): string {
  return text.toLowerCase().replaceAll("ß", "ss").replaceAll("ς", "σ");
}

export interface Applied {
  jobs: Job[];
  /** Whether the job is in `jobs` now and was not before. */
  added: boolean;
  /** Whether the list changed at all. */
  changed: boolean;
}

/**
 * Folds one live job change into a loaded list, newest first.
 * - A job already shown is updated in place, or leaves the list when it no longer matches
 *   (a "running" filter drops a job that finished); an older version than the one shown is
 *   ignored.
 * - A job not shown that matches joins at its place by creation time, if that place is within
 *   what is loaded: on top for a new job, anywhere when every page is loaded (`complete`).
 *   An older job beyond the loaded pages is left for "Load more" to bring.
 */
export function applyJobChange(jobs: Job[], job: Job, f: Filters, complete: boolean): Applied {
  const key = jobKey(job);
  const at = jobs.findIndex((j) => jobKey(j) === key);
  const fits = matches(job, f);
  if (at >= 0) {
    // An older version of what is shown (changes can cross a page load): keep the newer one.
    if (Date.parse(job.updated_at) < Date.parse(jobs[at]!.updated_at)) return { jobs, added: false, changed: false };
    if (!fits) return { jobs: [...jobs.slice(0, at), ...jobs.slice(at + 1)], added: false, changed: true };
    const next = jobs.slice();
    next[at] = job;
    return { jobs: next, added: false, changed: true };
  }
  if (!fits) return { jobs, added: false, changed: false };
  const created = Date.parse(job.created_at);
  // The first loaded job created at or before this one: insert before it.
  let place = jobs.findIndex((j) => Date.parse(j.created_at) <= created);
  if (place < 0) {
    if (!complete) return { jobs, added: false, changed: false };
    place = jobs.length;
  }
  return { jobs: [...jobs.slice(0, place), job, ...jobs.slice(place)], added: true, changed: true };
}

/** Appends a further page, skipping jobs already shown (one may have arrived live meanwhile). */
export function appendPage(jobs: Job[], page: Job[]): Job[] {
  const seen = new Set(jobs.map(jobKey));
  return [...jobs, ...page.filter((j) => !seen.has(jobKey(j)))];
}
