import { describe, expect, it } from "vitest";

import { parseChoice, resolveTheme, THEME_CHOICES } from "./theme";

describe("theme", () => {
  it("follows the OS unless a theme is forced", () => {
    expect(resolveTheme("system", true)).toBe("dark");
    expect(resolveTheme("system", false)).toBe("light");
    expect(resolveTheme("light", true)).toBe("light");
    expect(resolveTheme("dark", false)).toBe("dark");
  });

  it("reads back only light or dark as a forced choice; anything else follows the OS", () => {
    expect(parseChoice("dark")).toBe("dark");
    expect(parseChoice("light")).toBe("light");
    for (const stored of [null, undefined, "", "system", "Dark", "auto"]) expect(parseChoice(stored)).toBe("system");
  });

  it("offers every choice once, the OS's first", () => {
    expect(THEME_CHOICES.map((c) => c.value)).toEqual(["system", "light", "dark"]);
  });
});
