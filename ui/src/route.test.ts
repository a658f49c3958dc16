import { describe, expect, it } from "vitest";

import { formatRoute, parseRoute, screenHref, screenKey, takeCode, takeToken } from "./route";

describe("routes", () => {
  it("round-trips every screen", () => {
    for (const hash of ["#/jobs", "#/jobs?state=running&provider=generic&q=crawl", "#/jobs?group=sweep-7", "#/metrics", "#/settings", "#/refused", "#/start", "#/jobs/generic/job-42"]) {
      expect(formatRoute(parseRoute(hash))).toBe(hash);
    }
  });

  it("escapes job ids with slashes and spaces", () => {
    const hash = formatRoute({ screen: "job", provider: "fal", jobId: "a/b c" });
    expect(hash).toBe("#/jobs/fal/a%2Fb%20c");
    expect(parseRoute(hash)).toEqual({ screen: "job", provider: "fal", jobId: "a/b c" });
  });

  it("opens a job with the cancel's question from a notification's button", () => {
    expect(parseRoute("#/jobs/replicate/p1?ask=cancel")).toEqual({ screen: "job", provider: "replicate", jobId: "p1", ask: "cancel" });
    expect(formatRoute({ screen: "job", provider: "replicate", jobId: "p1", ask: "cancel" })).toBe("#/jobs/replicate/p1?ask=cancel");
    expect(parseRoute("#/jobs/replicate/p1?ask=other")).toEqual({ screen: "job", provider: "replicate", jobId: "p1" });
  });

  it("falls back to the job list", () => {
    expect(parseRoute("")).toEqual({ screen: "jobs", state: "", provider: "", q: "", group: "" });
    expect(parseRoute("#/nowhere").screen).toBe("jobs");
  });

  it("takes the token out of the first address", () => {
    expect(takeToken("#token=abc")).toEqual({ token: "abc", hash: "#/jobs" });
    expect(takeToken("#token=abc&view=/jobs/generic/x")).toEqual({ token: "abc", hash: "#/jobs/generic/x" });
    expect(takeToken("#/metrics")).toEqual({ token: null, hash: "#/metrics" });
  });

  it("addresses each screen as its tab links to it", () => {
    expect(screenHref("jobs")).toBe("#/jobs");
    expect(screenHref("start")).toBe("#/start");
    for (const screen of ["jobs", "metrics", "refused", "settings", "start"] as const) expect(parseRoute(screenHref(screen)).screen).toBe(screen);
  });

  it("counts a new screen or another job as a navigation, not a new filter or the cancel question", () => {
    const key = (hash: string) => screenKey(parseRoute(hash));
    expect(key("#/jobs?state=running")).toBe(key("#/jobs"));
    expect(key("#/jobs?q=crawl&group=sweep-7")).toBe(key("#/jobs"));
    expect(key("#/jobs/replicate/p1?ask=cancel")).toBe(key("#/jobs/replicate/p1"));
    expect(key("#/jobs/replicate/p1")).not.toBe(key("#/jobs/replicate/p2"));
    expect(key("#/jobs/generic/a%2Fb")).not.toBe(key("#/jobs/generic/a"));
    expect(key("#/metrics")).not.toBe(key("#/settings"));
    expect(key("#/jobs/generic/x")).not.toBe(key("#/jobs"));
  });

  it("takes a one-time code out of the address", () => {
    expect(takeCode("#code=c0de")).toEqual({ code: "c0de", hash: "#/jobs" });
    expect(takeCode("#code=c0de&view=/jobs/generic/x")).toEqual({ code: "c0de", hash: "#/jobs/generic/x" });
    expect(takeCode("#/jobs?q=code=1")).toEqual({ code: null, hash: "#/jobs?q=code=1" });
    expect(takeCode("#/jobs?state=x&code=1")).toEqual({ code: null, hash: "#/jobs?state=x&code=1" });
    expect(takeToken("#code=c0de")).toEqual({ token: null, hash: "#code=c0de" });
  });
});
