// Light or dark: the OS's choice (`prefers-color-scheme`) unless this browser was told otherwise
// (Settings, "Appearance"). The choice is this client's own, like the window's size: a hub's
// browser and the desktop window may differ, so it stays in this browser's localStorage, not in
// the engine. The page shows the theme as `<html data-theme="light|dark">`; styles.css keys its
// colours on it, and the charts read their colours from those same CSS properties.

import { store } from "./store";

export type Theme = "light" | "dark";
/** What the user chose: follow the OS, or force one theme. */
export type ThemeChoice = "system" | Theme;

export const THEME_CHOICES: { value: ThemeChoice; label: string }[] = [
  { value: "system", label: "As the system (light or dark)" },
  { value: "light", label: "Light" },
  { value: "dark", label: "Dark" },
];

const CHOICE_KEY = "nevermiss-theme";

/** A stored value read back: anything but `light` or `dark` (absent, old, mistyped) follows the OS. */
export function parseChoice(stored: string | null | undefined): ThemeChoice {
  return stored === "light" || stored === "dark" ? stored : "system";
}

/** The theme shown for a choice, given whether the OS is in dark mode now. */
export function resolveTheme(choice: ThemeChoice, systemDark: boolean): Theme {
  if (choice !== "system") return choice;
  return systemDark ? "dark" : "light";
}

/** The theme shown now; components that draw their own colours (charts) watch it. */
export const theme = store<Theme>("light");
/** The user's choice; Settings shows and changes it. */
export const themeChoice = store<ThemeChoice>("system");

function storedChoice(): ThemeChoice {
  try {
    return parseChoice(localStorage.getItem(CHOICE_KEY));
  } catch {
    return "system"; // Storage off (private mode): follow the OS.
  }
}

let systemDark: MediaQueryList | null = null;

function show(): void {
  const shown = resolveTheme(themeChoice.get(), systemDark?.matches ?? false);
  document.documentElement.dataset.theme = shown;
  if (theme.get() !== shown) theme.set(shown);
}

/** Applies the stored choice and follows the OS's changes from then on. Called once, before the first render. */
export function startTheme(): void {
  systemDark = window.matchMedia("(prefers-color-scheme: dark)");
  themeChoice.set(storedChoice());
  show();
  systemDark.addEventListener("change", show);
}

/** Keeps a new choice (for this browser) and shows it at once. */
export function chooseTheme(choice: ThemeChoice): void {
  try {
    if (choice === "system") localStorage.removeItem(CHOICE_KEY);
    else localStorage.setItem(CHOICE_KEY, choice);
  } catch {
    // Storage off: the choice holds for this page only.
  }
  themeChoice.set(choice);
  show();
}
