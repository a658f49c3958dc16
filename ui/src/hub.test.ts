import { describe, expect, it } from "vitest";

import { DISCONNECT, hubFormOf, hubInputOf, type HubState, hubStatus } from "./hub";

const alone: HubState = { url: null, token_set: false, connected: false, device: null, last_error: null };
const connected: HubState = { url: "https://hub.example.com", token_set: true, connected: true, device: "laptop", last_error: null };

describe("hub", () => {
  it("says where the connection stands", () => {
    expect(hubStatus(alone)).toEqual({ level: "info", text: expect.stringContaining("Not connected to a hub") });
    expect(hubStatus(connected)).toEqual({ level: "ok", text: "Connected to https://hub.example.com as device 'laptop'." });
    expect(hubStatus({ ...connected, connected: false, last_error: "401: the device token was refused" }).text).toBe(
      "Not connected to https://hub.example.com: 401: the device token was refused",
    );
    expect(hubStatus({ ...connected, connected: false, token_set: false }).text).toContain("no device token");
  });

  it("keeps a stored token when none is typed, and sends a typed one", () => {
    const form = hubFormOf(connected);
    expect(form).toEqual({ url: "https://hub.example.com", token: "" });
    expect(hubInputOf(form, connected)).toEqual({ input: { url: "https://hub.example.com" }, errors: {} });
    expect(hubInputOf({ url: "https://hub.example.com/ ", token: " t0k " }, connected).input).toEqual({ url: "https://hub.example.com", token: "t0k" });
  });

  it("needs an http(s) address, and a token when none is stored", () => {
    const { errors } = hubInputOf({ url: "hub.example.com", token: "" }, alone);
    expect(errors.url).toContain("http://");
    expect(errors.token).toContain("nevermiss devices add");
    expect(hubInputOf({ url: "", token: "x" }, alone).errors.url).toContain("Disconnect");
  });

  it("disconnects with an empty address", () => {
    expect(DISCONNECT).toEqual({ url: "" });
  });
});
