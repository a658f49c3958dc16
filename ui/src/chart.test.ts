import { describe, expect, it } from "vitest";

import { chartData, compact, niceCeil, themeColor } from "./components/Chart";

describe("hourly chart data", () => {
  it("adds the end of the current hour: a plateau for steps, nothing for bars", () => {
    const data = chartData([0, 3600], [
      { label: "a", values: [1, 2], color: "--series-test" },
      { label: "b", values: [3, 4], color: "--series-test", bars: true },
    ]);
    expect(data).toEqual([
      [0, 3600, 7200],
      [1, 2, 2],
      [3, 4, null],
    ]);
  });

  it("writes axis numbers short", () => {
    expect([950, 1000, 1250, 35_000, 1_500_000].map(compact)).toEqual(["950", "1k", "1.3k", "35k", "1.5M"]);
  });
});

describe("the top of the y axis", () => {
  it("is a round number at or above the highest value", () => {
    expect([0, 1, 3, 7, 163, 188, 1000, 1001].map(niceCeil)).toEqual([1, 1, 5, 10, 200, 200, 1000, 2000]);
  });
});

describe("chart colours", () => {
  it("are the theme's custom property, as the canvas needs it (#rrggbb)", () => {
    const theme: Record<string, string> = { "--series-deliveries": " #6ea8ff" };
    expect(themeColor("--series-deliveries", (n) => theme[n] ?? "")).toBe("#6ea8ff");
  });

  it("fall back to a grey both themes can read when the property is missing or not a hex colour", () => {
    expect(themeColor("--nope", () => "")).toBe("#808080");
    expect(themeColor("--named", () => "rebeccapurple")).toBe("#808080");
  });
});
