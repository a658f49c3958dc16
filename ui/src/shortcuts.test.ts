import { describe, expect, it } from "vitest";

import { isField, type KeyPress, readKey, SHORTCUTS, START } from "./shortcuts";

const key = (k: string, more: Partial<KeyPress> = {}): KeyPress => ({ key: k, modified: false, inField: false, ...more });

describe("keyboard shortcuts", () => {
  it("opens the list on ?", () => {
    expect(readKey(START, key("?")).action).toEqual({ kind: "help" });
  });

  it("goes to a screen on g then its letter", () => {
    const afterG = readKey(START, key("g"));
    expect(afterG.action).toBeNull();
    expect(readKey(afterG.state, key("m"))).toEqual({ state: START, action: { kind: "go", screen: "metrics" } });
    expect(readKey(readKey(START, key("g")).state, key("j")).action).toEqual({ kind: "go", screen: "jobs" });
  });

  it("forgets the g after any other key", () => {
    const afterG = readKey(START, key("g")).state;
    expect(readKey(afterG, key("x"))).toEqual({ state: START, action: null });
    expect(readKey(START, key("m")).action).toBeNull();
  });

  it("leaves keys typed into a field, or held with Ctrl, Alt or Meta, alone", () => {
    expect(readKey(START, key("?", { inField: true })).action).toBeNull();
    expect(readKey(readKey(START, key("g")).state, key("s", { inField: true })).action).toBeNull();
    expect(readKey(START, key("g", { modified: true })).state).toEqual(START);
  });

  it("lists every go-to key the reader knows, and only those", () => {
    const listed = SHORTCUTS.filter((s) => s.keys[0] === "g").map((s) => s.keys[1]!);
    for (const letter of "abcdefghijklmnopqrstuvwxyz") {
      const action = readKey(readKey(START, key("g")).state, key(letter)).action;
      expect(action !== null, `g ${letter}`).toBe(listed.includes(letter));
    }
  });

  it("tells fields from other targets", () => {
    expect(isField({ tagName: "INPUT" } as unknown as EventTarget)).toBe(true);
    expect(isField({ tagName: "SELECT" } as unknown as EventTarget)).toBe(true);
    expect(isField({ tagName: "DIV", isContentEditable: true } as unknown as EventTarget)).toBe(true);
    expect(isField({ tagName: "A", isContentEditable: false } as unknown as EventTarget)).toBe(false);
    expect(isField(null)).toBe(false);
  });
});
