import { describe, expect, it } from "vitest";

import {
  type Channel,
  failingChannelWarnings,
  formChanged,
  formOf,
  inputOf,
  lastErrorText,
  lastSeenText,
  nameError,
  newForm,
  newWebhookSecret,
  removedText,
  secretState,
  talliesText,
  unplacedErrors,
} from "./channels";

function channel(over: Partial<Channel> = {}): Channel {
  return {
    name: "ops",
    kind: "webhook",
    enabled: true,
    outcomes: ["failed", "stuck"],
    summary_after: 5,
    quiet_hours: null,
    url: "https://example.com/hook",
    secrets_set: ["secret"],
    enqueued: 12,
    delivered: 10,
    failed: 1,
    pending: 1,
    last_error: null,
    last_error_at: null,
    failing: false,
    last_seen_at: null,
    ...over,
  };
}

describe("channel form", () => {
  it("leaves an unchanged secret out of the PUT, so the stored one stays", () => {
    const { input, errors } = inputOf(formOf(channel()));
    expect(errors).toEqual({});
    expect(input).toEqual({ kind: "webhook", enabled: true, outcomes: ["failed", "stuck"], summary_after: 5, url: "https://example.com/hook" });
    expect("secret" in input).toBe(false);
  });

  it("sends a typed secret, and an empty one to clear it", () => {
    const form = formOf(channel());
    expect(inputOf({ ...form, secrets: { secret: " whsec_abc " } }).input.secret).toBe("whsec_abc");
    expect(inputOf({ ...form, secrets: { secret: "whsec_abc" }, clear: { secret: true } }).input.secret).toBe("");
  });

  it("sends a Slack or Discord URL only as a secret, when typed", () => {
    const slack = formOf(channel({ kind: "slack", url: undefined, secrets_set: ["url"] }));
    expect(inputOf(slack).input).toEqual({ kind: "slack", enabled: true, outcomes: ["failed", "stuck"], summary_after: 5 });
    expect(inputOf({ ...slack, secrets: { url: "https://hooks.slack.com/services/x" } }).input.url).toBe("https://hooks.slack.com/services/x");
  });

  it("sends an e-mail channel's fields, the port as a number, and no port when empty", () => {
    const form = newForm("email");
    form.text = { ...form.text, host: " smtp.example.com ", port: "", from: "a@example.com", to: "b@example.com, c@example.com", username: "" };
    form.tls = "tls";
    form.secrets = { password: "pw" };
    const { input, errors } = inputOf(form);
    expect(errors).toEqual({});
    expect(input).toEqual({
      kind: "email", enabled: true, outcomes: ["succeeded", "failed", "canceled", "stuck", "needs_input"], summary_after: 5,
      host: "smtp.example.com", tls: "tls", username: "", password: "pw", from: "a@example.com", to: "b@example.com, c@example.com",
    });
    expect(inputOf({ ...form, text: { ...form.text, port: "465" } }).input.port).toBe(465);
    expect(inputOf({ ...form, text: { ...form.text, port: "70000" } }).errors.port).toContain("between 1 and 65535");
  });

  it("sends quiet hours only when on, and refuses a summary size that is not a whole number", () => {
    const form = { ...formOf(channel()), quiet: true, quiet_from: "22:30", quiet_to: "06:00", urgent_breaks_through: false };
    expect(inputOf(form).input.quiet_hours).toEqual({ from: "22:30", to: "06:00", urgent_breaks_through: false });
    expect("quiet_hours" in inputOf({ ...form, quiet: false }).input).toBe(false);
    expect(inputOf({ ...form, quiet_to: "" }).errors.quiet_hours).toBeTruthy();
    expect(inputOf({ ...form, summary_after: "0" }).input.summary_after).toBe(0);
    expect(inputOf({ ...form, summary_after: "five" }).errors.summary_after).toContain("whole number");
  });

  it("round-trips a stored channel's quiet hours, and has no fields for a device", () => {
    const c = channel({ kind: "device", url: undefined, secrets_set: [], quiet_hours: { from: "23:00", to: "07:00", urgent_breaks_through: true } });
    const { input } = inputOf(formOf(c));
    expect(input).toEqual({ kind: "device", enabled: true, outcomes: ["failed", "stuck"], summary_after: 5, quiet_hours: { from: "23:00", to: "07:00", urgent_breaks_through: true } });
  });

  it("knows when the form differs from what is stored", () => {
    const stored = formOf(channel());
    expect(formChanged(stored, formOf(channel()))).toBe(false);
    expect(formChanged(stored, { ...stored, summary_after: "6" })).toBe(true);
    expect(formChanged(stored, { ...stored, secrets: { secret: "x" } })).toBe(true);
    expect(formChanged(stored, { ...stored, secrets: { secret: "  " } })).toBe(false);
    expect(formChanged(stored, { ...stored, clear: { secret: true } })).toBe(true);
    expect(formChanged(stored, { ...stored, outcomes: ["failed"] })).toBe(true);
  });

  it("says whether a secret is set and what saving will do", () => {
    const c = channel();
    const form = formOf(c);
    expect(secretState(c, form, "secret")).toBe("set");
    expect(secretState(c, { ...form, secrets: { secret: "whsec_x" } }, "secret")).toBe("set: replaced on save");
    expect(secretState(c, { ...form, clear: { secret: true } }, "secret")).toBe("set: removed on save");
    expect(secretState(null, newForm("ntfy"), "token")).toBe("not set");
  });

  it("names the refusals no field shows", () => {
    expect(unplacedErrors({ url: "is required", kind: "devices are added on the hub" }, "webhook")).toEqual(["kind: devices are added on the hub"]);
  });

  it("makes Standard Webhooks secrets", () => {
    const s = newWebhookSecret();
    expect(s).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    expect(atob(s.slice(6))).toHaveLength(24);
    expect(newWebhookSecret()).not.toBe(s);
  });
});

describe("channel names", () => {
  it("takes lower-case letters, digits, - and _", () => {
    expect(nameError("phone")).toBeNull();
    expect(nameError("ops-hook_2")).toBeNull();
    expect(nameError("")).toBe("is required");
    expect(nameError("Phone")).toContain("lower-case");
    expect(nameError("a.b")).toContain("lower-case");
    expect(nameError("-x")).toContain("starting with");
    expect(nameError("x".repeat(41))).toContain("at most 40");
    expect(nameError("ops", ["desktop", "ops"])).toBe("is taken by another channel");
  });
});

describe("channel tallies", () => {
  const now = Date.parse("2026-01-01T12:00:00Z");

  it("counts in plain words", () => {
    expect(talliesText(channel({ enqueued: 1234 }))).toBe("1,234 queued · 10 delivered · 1 failed · 1 waiting");
  });

  it("says the last error and when", () => {
    expect(lastErrorText(channel(), now)).toBeNull();
    expect(lastErrorText(channel({ last_error: "HTTP 500", last_error_at: "2026-01-01T11:55:00Z" }), now)).toBe("Last error 5 min ago: HTTP 500");
  });

  it("says when a device was last seen", () => {
    expect(lastSeenText(channel({ last_seen_at: "2026-01-01T10:00:00Z" }), now)).toBe("Last seen 2 h ago");
    expect(lastSeenText(channel(), now)).toBe("Never connected yet");
  });

  it("says what a removal dropped", () => {
    expect(removedText("ops", 0)).toContain("nothing was waiting");
    expect(removedText("ops", 3)).toContain("3 waiting notifications dropped");
    expect(removedText("ops", 1)).toContain("1 waiting notification dropped");
  });
});

describe("failing channels", () => {
  it("warns for each failing channel, with its error and what waits", () => {
    const w = failingChannelWarnings({ failing_channels: { phone: { kind: "ntfy", last_error: "HTTP 403: forbidden", pending: 4 } } });
    expect(w).toHaveLength(1);
    expect(w[0]!.id).toBe("channel:phone");
    expect(w[0]!.level).toBe("error");
    expect(w[0]!.title).toBe("Channel 'phone' keeps failing: HTTP 403: forbidden (4 waiting)");
  });

  it("says nothing without metrics or failing channels", () => {
    expect(failingChannelWarnings(null)).toEqual([]);
    expect(failingChannelWarnings({ failing_channels: {} })).toEqual([]);
  });
});
