import { describe, expect, it } from "vitest";

import { changes, draftOf, newSecret, type SettingsView, soundOptions, storageText, webhookSecretHint, webhookUrl } from "./settings";

const view: SettingsView = {
  poll_interval_secs: 60,
  poll_interval_overridden: false,
  stuck_threshold_secs: 1800,
  sla_secs: 300,
  delivery_retention_days: 7,
  abandon_after_secs: 259200,
  job_retention_days: 90,
  ui_url: null,
  group_members: "failures",
  group_end_grace_secs: 60,
  provider_timeout_secs: 20,
  devices_may_cancel: "off",
  devices_may_read_bodies: "off",
  sound_urgent: "dialog-warning",
  sound_normal: "off",
  providers: { generic: { base_url: null, stuck_threshold_secs: null }, openai: { base_url: "http://127.0.0.1:9", stuck_threshold_secs: 600 } },
  durations: { poll_interval_secs: "1m", stuck_threshold_secs: "30m", sla_secs: "5m", abandon_after_secs: "3d", "stuck_threshold_secs.openai": "10m" },
  tunnel: {},
};

describe("settings form", () => {
  it("sends only what changed, numbers as numbers", () => {
    const loaded = draftOf(view);
    const draft = { ...loaded, poll_interval_secs: "30", "openai.base_url": "", sla_secs: " 12 " };
    expect(changes(loaded, draft)).toEqual({ poll_interval_secs: 30, "openai.base_url": "", sla_secs: 12 });
    expect(loaded.devices_may_cancel).toBe("off");
    expect(changes(loaded, { ...loaded, devices_may_cancel: "on" })).toEqual({ devices_may_cancel: "on" });
  });

  it("offers each urgency's sound, off by default, and sends the name chosen", () => {
    const loaded = draftOf(view);
    expect([loaded.sound_urgent, loaded.sound_normal]).toEqual(["dialog-warning", "off"]);
    expect(changes(loaded, { ...loaded, sound_normal: "message-new-instant", sound_urgent: "off" })).toEqual({
      sound_normal: "message-new-instant",
      sound_urgent: "off",
    });
    expect(soundOptions("off")[0]).toEqual({ value: "off", label: "Off: no sound" });
    expect(soundOptions("off").map((o) => o.value)).toContain("dialog-warning");
    // A name set elsewhere (the API) stays choosable.
    expect(soundOptions("phone-incoming-call").map((o) => o.value)).toContain("phone-incoming-call");
    expect(soundOptions("bell").filter((o) => o.value === "bell")).toHaveLength(1);
  });

  it("shows durations as the engine writes them, and sends them as typed", () => {
    const loaded = draftOf(view);
    expect(loaded.stuck_threshold_secs).toBe("30m");
    expect(loaded.abandon_after_secs).toBe("3d");
    expect(loaded["stuck_threshold_secs.openai"]).toBe("10m");
    expect(loaded.delivery_retention_days).toBe("7");
    expect(changes(loaded, { ...loaded, stuck_threshold_secs: " 6h ", abandon_after_secs: "3d" })).toEqual({ stuck_threshold_secs: "6h" });
  });

  it("sends what is not a number as typed, for the server to name the problem", () => {
    const loaded = draftOf(view);
    expect(changes(loaded, { ...loaded, poll_interval_secs: "2s" })).toEqual({ poll_interval_secs: "2s" });
  });

  it("does not send an emptied per-provider threshold", () => {
    const loaded = draftOf(view);
    expect(changes(loaded, { ...loaded, "stuck_threshold_secs.openai": "" })).toEqual({});
  });

  it("sends tunnel settings as text, and its quiet time as a number", () => {
    const loaded = draftOf({ ...view, tunnel: { tunnel: null, "tunnel.bore_server": null, "tunnel.self_test_quiet_secs": null } });
    expect(loaded.tunnel).toBe("");
    const draft = { ...loaded, tunnel: "bore", "tunnel.bore_server": " 1234 ", "tunnel.self_test_quiet_secs": "900" };
    expect(changes(loaded, draft)).toEqual({ tunnel: "bore", "tunnel.bore_server": "1234", "tunnel.self_test_quiet_secs": 900 });
  });

  it("has a discover choice only for providers that can list their jobs, sent as on or off", () => {
    const loaded = draftOf({ ...view, providers: { ...view.providers, replicate: { base_url: null, stuck_threshold_secs: null, discover: "off" } } });
    expect(loaded["replicate.discover"]).toBe("off");
    expect("generic.discover" in loaded).toBe(false);
    expect(changes(loaded, { ...loaded, "replicate.discover": "on" })).toEqual({ "replicate.discover": "on" });
  });

  it("sends the address for links in notifications as typed, and empty for this machine", () => {
    const loaded = draftOf(view);
    expect(loaded.ui_url).toBe("");
    expect("notify_on" in loaded).toBe(false);
    expect(changes(loaded, { ...loaded, ui_url: " https://hub.example.com " })).toEqual({ ui_url: "https://hub.example.com" });
    const set = draftOf({ ...view, ui_url: "https://hub.example.com" });
    expect(changes(set, { ...set, ui_url: "" })).toEqual({ ui_url: "" });
  });

  it("makes 256-bit webhook secrets", () => {
    const s = newSecret();
    expect(s).toMatch(/^nmsec_[0-9a-f]{64}$/);
    expect(newSecret()).not.toBe(s);
  });
});

describe("storageText", () => {
  it("says whose the data is, and names the node on a fleet", () => {
    expect(storageText({ database: "sqlite", node: "local" })).toContain("this instance's own");
    const fleet = storageText({ database: "postgres", node: "1a2b3c4d" });
    expect(fleet).toContain("shared by every serve process");
    expect(fleet).toContain("node 1a2b3c4d");
  });
});


describe("webhook URLs and secrets by how a provider's webhooks come in", () => {
  it("gives /hooks/{provider}, the token's URL for an unsigned sender, and none for a provider only polled", () => {
    expect(webhookUrl("https://t.example/", "openai")).toBe("https://t.example/hooks/openai");
    expect(webhookUrl("https://t.example", "cursor", "signed")).toBe("https://t.example/hooks/cursor");
    expect(webhookUrl("https://t.example", "runpod", "url_token")).toBe("https://t.example/hooks/runpod/<webhook secret>");
    expect(webhookUrl("https://t.example", "runpod", "url_token", "nmsec_ab/c")).toBe("https://t.example/hooks/runpod/nmsec_ab%2Fc");
    expect(webhookUrl("https://t.example", "groq", "none")).toBeNull();
  });

  it("says what the webhook secret is for each way in", () => {
    expect(webhookSecretHint("groq", "none")).toMatch(/sends no webhooks.*only the API key/);
    expect(webhookSecretHint("fal", "platform_keys")).toMatch(/published keys, which NeverMiss fetches: no secret/);
    expect(webhookSecretHint("runpod", "url_token")).toMatch(/token in its webhook URL \(\/hooks\/runpod\/<secret>\)/);
    expect(webhookSecretHint("generic", "signed")).toMatch(/HMAC-SHA256/);
  });
});
