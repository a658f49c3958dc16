import { describe, expect, it } from "vitest";

import type { Refusal } from "./generated/Refusal";
import { headerLines, summary } from "./refusedview";

function refusal(kind: Refusal["kind"], id: number): Refusal {
  return {
    id,
    received_at: "2026-11-30T10:00:00.000Z",
    provider: "openai",
    status: 401,
    kind,
    error: "invalid signature",
    cause: "the signature does not match",
    headers: {},
    body: "{}",
    body_length: 2,
    body_truncated: false,
  };
}

describe("the refused view", () => {
  it("summarizes kinds, most frequent first", () => {
    const list = [refusal("unknown_provider", 3), refusal("bad_signature", 2), refusal("bad_signature", 1)];
    expect(summary(list)).toBe("2 signature does not match, 1 unknown provider in the URL");
    expect(summary([])).toBe("");
  });

  it("lists headers sorted by name", () => {
    expect(headerLines({ "webhook-id": "m1", authorization: "••••" })).toBe("authorization: ••••\nwebhook-id: m1");
  });
});
