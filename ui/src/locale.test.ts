import { describe, expect, it } from "vitest";

import { guardNavigatorLanguage, isLanguageTag, usableLanguages } from "./locale";

describe("navigator language guard", () => {
  it("tells language tags from the POSIX locale name C", () => {
    expect(isLanguageTag("en-US")).toBe(true);
    expect(isLanguageTag("de")).toBe(true);
    expect(isLanguageTag("C")).toBe(false);
    expect(isLanguageTag("")).toBe(false);
    expect(isLanguageTag(undefined)).toBe(false);
  });

  it("keeps the usable languages, else falls back", () => {
    expect(usableLanguages(["C", "fr-FR"], "en-US")).toEqual(["fr-FR"]);
    expect(usableLanguages(["C"], "en-US")).toEqual(["en-US"]);
  });

  it("replaces a navigator's unusable language so Intl formatters can be built from it", () => {
    const nav = { language: "C", languages: ["C"] } as unknown as Navigator;
    expect(() => new Intl.NumberFormat(nav.language)).toThrow(RangeError);
    guardNavigatorLanguage(nav);
    expect(isLanguageTag(nav.language)).toBe(true);
    expect(nav.languages.every(isLanguageTag)).toBe(true);
    expect(() => new Intl.NumberFormat(nav.language)).not.toThrow();
  });

  it("leaves a navigator with good languages alone", () => {
    const nav = { language: "de-DE", languages: ["de-DE", "en"] } as unknown as Navigator;
    guardNavigatorLanguage(nav);
    expect(nav.language).toBe("de-DE");
    expect(nav.languages).toEqual(["de-DE", "en"]);
  });
});
