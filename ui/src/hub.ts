// The hub's logic (Settings, "Hub"): this app as a device of a NeverMiss hub. What the state
// says in words, and the PUT /api/hub body from the form (a token left empty keeps the stored
// one; an empty address disconnects). The shapes are the engine's own (api/hub.rs).

import type { HubInput } from "./generated/HubInput";
import type { HubState } from "./generated/HubState";

export type { HubInput, HubState };

export interface HubForm {
  url: string;
  /** Typed only to replace the stored one. */
  token: string;
}

export function hubFormOf(state: HubState | null): HubForm {
  return { url: state?.url ?? "", token: "" };
}

/** Where the connection stands, in words, and how loudly to say it. */
export function hubStatus(state: HubState): { level: "ok" | "warn" | "info"; text: string } {
  if (!state.url) return { level: "info", text: "Not connected to a hub: this app shows this machine's own jobs." };
  if (state.connected) {
    return { level: "ok", text: `Connected to ${state.url}${state.device ? ` as device '${state.device}'` : ""}.` };
  }
  if (!state.token_set) return { level: "warn", text: `Not connected to ${state.url}: no device token is set.` };
  return { level: "warn", text: `Not connected to ${state.url}${state.last_error ? `: ${state.last_error}` : " yet."}` };
}

/**
 * The PUT /api/hub body to connect, or the fields to fix first. The token is sent only when
 * typed; without one stored, it is needed.
 */
export function hubInputOf(form: HubForm, state: HubState | null): { input: HubInput; errors: Record<string, string> } {
  const errors: Record<string, string> = {};
  const url = form.url.trim().replace(/\/+$/, "");
  const token = form.token.trim();
  if (!url) errors.url = "is required (Disconnect stops using a hub)";
  else if (!/^https?:\/\/[^/\s]+/.test(url)) errors.url = "must be an http:// or https:// address";
  if (!token && !state?.token_set) errors.token = "is required: `nevermiss devices add NAME` on the hub prints one";
  const input: HubInput = { url };
  if (token) input.token = token;
  return { input, errors };
}

/** The body that disconnects from the hub. */
export const DISCONNECT: HubInput = { url: "" };
