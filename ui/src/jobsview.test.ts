import { describe, expect, it } from "vitest";

import type { Job } from "./generated/Job";
import { appendPage, applyJobChange, matches } from "./jobsview";

function job(id: string, created: number, over: Partial<Job> = {}): Job {
  const at = new Date(Date.UTC(2026, 10, 30, 10, 0, created)).toISOString();
  return {
    provider: "generic",
    job_id: id,
    label: null,
    state: "running",
    seq: 1,
    error: null,
    created_at: at,
    updated_at: at,
    finished_at: null,
    started_at: null,
    terminal_source: null,
    notified_at: null,
    detail: null,
    last_polled_at: null,
    poll_error: null,
    poll_error_kind: null,
    abandoned_at: null,
    abandoned_reason: null,
    group: null,
    result: null,
    provider_url: null,
    kind: null,
    expected_ms: null,
    ...over,
  };
}

const none = { state: "", provider: "", q: "", group: "" };

describe("matches", () => {
  it("filters by state, provider, and id or label ignoring case", () => {
    const j = job("Job-42", 0, { label: "Nightly Crawl" });
    expect(matches(j, none)).toBe(true);
    expect(matches(j, { ...none, state: "running" })).toBe(true);
    expect(matches(j, { ...none, state: "failed" })).toBe(false);
    expect(matches(j, { ...none, provider: "openai" })).toBe(false);
    expect(matches(j, { ...none, q: "job-4" })).toBe(true);
    expect(matches(j, { ...none, q: "crawl" })).toBe(true);
    expect(matches(j, { ...none, q: "  crawl " })).toBe(true);
    expect(matches(j, { ...none, q: "batch" })).toBe(false);
  });

  it("searches the group's name too, folding case as the server does", () => {
    const j = job("shard-1", 0, { label: "Straße ΟΔΟΣ", group: "Nightly-Sweep" });
    expect(matches(j, { ...none, q: "nightly-sw" })).toBe(true);
    expect(matches(j, { ...none, q: "STRASSE" })).toBe(true);
    expect(matches(j, { ...none, q: "οδοσ" })).toBe(true);
    expect(matches(j, { ...none, q: "weekly" })).toBe(false);
  });

  it("filters by group", () => {
    const grouped = job("shard-1", 0, { group: "sweep-7" });
    expect(matches(grouped, { ...none, group: "sweep-7" })).toBe(true);
    expect(matches(grouped, { ...none, group: "sweep-8" })).toBe(false);
    expect(matches(job("alone", 0), { ...none, group: "sweep-7" })).toBe(false);
  });
});

describe("applyJobChange", () => {
  const list = [job("c", 30), job("b", 20), job("a", 10)];

  it("puts a new job on top", () => {
    const r = applyJobChange(list, job("d", 40), none, false);
    expect(r.jobs.map((j) => j.job_id)).toEqual(["d", "c", "b", "a"]);
    expect(r.added).toBe(true);
  });

  it("updates a shown job in place", () => {
    const r = applyJobChange(list, job("b", 20, { state: "succeeded" }), none, false);
    expect(r.jobs.map((j) => `${j.job_id}:${j.state}`)).toEqual(["c:running", "b:succeeded", "a:running"]);
    expect(r.added).toBe(false);
    expect(r.changed).toBe(true);
  });

  it("ignores an older version than the one shown", () => {
    const newer = job("b", 20, { state: "succeeded", updated_at: "2026-11-30T10:05:00.000Z" });
    const older = job("b", 20, { state: "running", updated_at: "2026-11-30T10:01:00.000Z" });
    const r = applyJobChange([newer], older, none, true);
    expect(r.changed).toBe(false);
    expect(r.jobs[0]!.state).toBe("succeeded");
  });

  it("drops a shown job that leaves the filter", () => {
    const r = applyJobChange(list, job("b", 20, { state: "succeeded" }), { ...none, state: "running" }, false);
    expect(r.jobs.map((j) => j.job_id)).toEqual(["c", "a"]);
  });

  it("ignores a job that does not match", () => {
    const r = applyJobChange(list, job("z", 50, { provider: "openai" }), { ...none, provider: "generic" }, false);
    expect(r.changed).toBe(false);
    expect(r.jobs).toBe(list);
  });

  it("leaves an old job beyond the loaded pages to Load more", () => {
    const r = applyJobChange(list, job("old", 1), none, false);
    expect(r.changed).toBe(false);
  });

  it("places an old job in order when every page is loaded", () => {
    const r = applyJobChange(list, job("mid", 15), none, true);
    expect(r.jobs.map((j) => j.job_id)).toEqual(["c", "b", "mid", "a"]);
    const tail = applyJobChange(list, job("old", 1), none, true);
    expect(tail.jobs.map((j) => j.job_id)).toEqual(["c", "b", "a", "old"]);
  });

  it("fills an empty list", () => {
    expect(applyJobChange([], job("x", 1), none, true).jobs.map((j) => j.job_id)).toEqual(["x"]);
  });
});

describe("appendPage", () => {
  it("skips jobs already shown", () => {
    const r = appendPage([job("c", 30), job("b", 20)], [job("b", 20), job("a", 10)]);
    expect(r.map((j) => j.job_id)).toEqual(["c", "b", "a"]);
  });
});
