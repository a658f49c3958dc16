// The keyboard shortcuts: what each key does (shown by `?`) and how a key press is read. Two-key
// shortcuts start with `g` ("go to"), as in GitHub and Gmail. Keys typed into a field are the
// field's, never a shortcut's.

import type { Route } from "./route";

type Screen = Exclude<Route["screen"], "job">;

/** What a key press asks for. */
export type ShortcutAction = { kind: "help" } | { kind: "go"; screen: Screen };

/** The "go to" keys, after `g`. */
const GO: Record<string, Screen> = { j: "jobs", m: "metrics", r: "refused", s: "settings", t: "start" };

/** The list `?` shows, in its order. The app's own keys first, then the page's. */
export const SHORTCUTS: { keys: string[]; what: string }[] = [
  { keys: ["?"], what: "Show this list" },
  { keys: ["/"], what: "Search the jobs (on Jobs)" },
  { keys: ["g", "j"], what: "Go to Jobs" },
  { keys: ["g", "m"], what: "Go to Metrics" },
  { keys: ["g", "r"], what: "Go to Refused" },
  { keys: ["g", "s"], what: "Go to Settings" },
  { keys: ["g", "t"], what: "Go to Get started" },
  { keys: ["Tab"], what: "Next link, button or field (Shift+Tab: the one before)" },
  { keys: ["Enter"], what: "Open the job whose link has focus; press the button that has focus" },
  { keys: ["Esc"], what: "Close this list; answer \u201ckeep it running\u201d to a cancel's question" },
];

/** Where a key press is read: after a `g` or not. */
export interface KeyState {
  afterG: boolean;
}

export const START: KeyState = { afterG: false };

/** A key press as the reader needs it. */
export interface KeyPress {
  key: string;
  /** Ctrl, Alt or Meta held: the browser's or the OS's shortcut, not ours. */
  modified: boolean;
  /** Typed into a field (input, select, textarea, editable text). */
  inField: boolean;
}

/** Reads one key press: the action it completes, if any, and the state for the next one. */
export function readKey(state: KeyState, press: KeyPress): { state: KeyState; action: ShortcutAction | null } {
  if (press.modified || press.inField) return { state: START, action: null };
  if (state.afterG) {
    const screen = GO[press.key];
    return { state: START, action: screen ? { kind: "go", screen } : null };
  }
  if (press.key === "g") return { state: { afterG: true }, action: null };
  if (press.key === "?") return { state: START, action: { kind: "help" } };
  return { state: START, action: null };
}

/** Whether a key event's target is a field that takes typed text or choices. */
export function isField(target: EventTarget | null): boolean {
  const el = target as HTMLElement | null;
  if (!el || typeof el.tagName !== "string") return false;
  return ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName) || el.isContentEditable === true;
}
