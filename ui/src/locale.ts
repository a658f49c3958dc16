// A process started with LANG=C (or C.UTF-8) gets `navigator.language` "C" from WebKitGTK, the
// desktop window's engine. That is not a BCP 47 language tag: every Intl constructor given it
// throws a RangeError, and uPlot builds an Intl.NumberFormat from it as it loads, so the whole page
// failed to start and the window stayed blank. This module is imported first (see main.tsx): it
// replaces such a language with the engine's own default before anything formats.

/** Whether `tag` is a language tag Intl accepts. */
export function isLanguageTag(tag: unknown): tag is string {
  if (typeof tag !== "string" || tag === "") return false;
  try {
    new Intl.NumberFormat(tag);
    return true;
  } catch {
    return false;
  }
}

/** The languages to report instead of `languages`: the usable ones, else the engine's default. */
export function usableLanguages(languages: readonly unknown[], fallback: string): string[] {
  const usable = languages.filter(isLanguageTag);
  return usable.length ? usable : [fallback];
}

export function guardNavigatorLanguage(nav: Navigator): void {
  const reported = [nav.language, ...(nav.languages ?? [])];
  if (reported.every(isLanguageTag)) return;
  const languages = usableLanguages(reported, new Intl.NumberFormat().resolvedOptions().locale);
  Object.defineProperty(nav, "language", { value: languages[0], configurable: true });
  Object.defineProperty(nav, "languages", { value: Object.freeze(languages.slice()), configurable: true });
}

if (typeof navigator !== "undefined") guardNavigatorLanguage(navigator);
