import { describe, expect, it } from "vitest";

import { ago, duration, groupProgress, jobTime, usually, visible } from "./format";

describe("format", () => {
  it("shows durations in two units at most", () => {
    const cases: [number, string][] = [
      [250, "250 ms"],
      [42_000, "42 s"],
      [192_000, "3 min 12 s"],
      [3_600_000, "1 h"],
      [7_500_000, "2 h 5 min"],
      [3 * 86_400_000 + 4 * 3_600_000, "3 d 4 h"],
      [-1, "–"],
    ];
    expect(cases.map(([ms]) => duration(ms))).toEqual(cases.map(([, text]) => text));
  });

  it("shows ages", () => {
    const now = Date.parse("2026-11-30T10:00:00Z");
    expect(ago("2026-11-30T09:59:55Z", now)).toBe("just now");
    expect(ago("2026-11-30T09:55:00Z", now)).toBe("5 min ago");
    expect(ago(null, now)).toBe("–");
  });

  it("gives a running job's age and a finished job's duration", () => {
    const now = Date.parse("2026-11-30T10:10:00Z");
    expect(jobTime({ created_at: "2026-11-30T10:00:00Z", finished_at: null, updated_at: "" }, now)).toEqual({ text: "10 min", finished: false });
    expect(jobTime({ created_at: "2026-11-30T10:00:00Z", finished_at: "2026-11-30T10:00:30Z", updated_at: "" }, now)).toEqual({
      text: "30 s",
      finished: true,
    });
    expect(jobTime({ created_at: "2026-11-30T10:10:00Z", finished_at: null, updated_at: "" }, now).text).toBe("<1 s");
    // Heard of late: counted from the provider's own start.
    const late = { created_at: "2026-11-30T10:09:30Z", started_at: "2026-11-30T08:40:00Z", finished_at: "2026-11-30T10:10:00Z", updated_at: "" };
    expect(jobTime(late, now)).toEqual({ text: "1 h 30 min", finished: true });
  });

  it("says what a job of its kind usually takes, and a running one's expected end", () => {
    const now = Date.parse("2026-11-30T10:10:00Z");
    const job = (created_at: string, finished_at: string | null, expected_ms: number | null) => ({ created_at, finished_at, expected_ms });
    expect(usually(job("2026-11-30T10:00:00Z", null, null), now)).toBeNull();
    expect(usually(job("2026-11-30T10:00:00Z", "2026-11-30T10:05:00Z", 252_000), now)).toEqual({
      text: "usually 4 min 12 s",
      end: null,
      over: false,
    });
    expect(usually(job("2026-11-30T10:08:00Z", null, 252_000), now)).toEqual({
      text: "usually 4 min 12 s",
      end: "ends in about 2 min 12 s",
      over: false,
    });
    expect(usually(job("2026-11-30T09:56:00Z", null, 252_000), now)).toEqual({ text: "usually 4 min 12 s", end: "9 min 48 s over", over: true });
    expect(usually(job("2026-11-30T10:05:48Z", null, 252_000), now)?.end).toBe("ends any moment");
  });
});

describe("groupProgress", () => {
  it("says how much of a group is done and what went wrong", () => {
    expect(groupProgress({ total: 20, running: 5, by_state: { running: 5, succeeded: 15 } })).toBe("15 of 20 done");
    expect(groupProgress({ total: 40, running: 0, by_state: { succeeded: 38, failed: 2 } })).toBe("all 40 done · 2 failed");
    expect(groupProgress({ total: 3, running: 1, by_state: { running: 1, needs_input: 1, canceled: 1 } })).toBe("2 of 3 done · 1 need input · 1 canceled");
    expect(groupProgress({ total: 2, running: 0, by_state: { ended: 1, succeeded: 1 } })).toBe("all 2 done · 1 ended, outcome unknown");
  });
});

describe("visible", () => {
  it("shows layout controls instead of applying them", () => {
    expect(visible("\u202elive")).toBe("[U+202E]live");
    expect(visible("a\nb\u2066c")).toBe("a[U+000A]b[U+2066]c");
    expect(visible("Über naïve 日本")).toBe("Über naïve 日本");
  });
});
