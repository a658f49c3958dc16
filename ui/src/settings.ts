// The settings form's logic: which fields changed, as the PUT /api/settings keys name them.
// The answer of GET /api/settings is built with json! in src-tauri/api/settings.rs (no Rust type
// to generate from), so its shape is written here.

export interface ProviderSettings {
  base_url: string | null;
  stuck_threshold_secs: number | null;
  /** Only for providers that can list their jobs (Replicate): watch every job they list. */
  discover?: "on" | "off";
}

export interface SettingsView {
  poll_interval_secs: number;
  /** `--poll-interval` or NEVERMISS_POLL_INTERVAL beats the stored value. */
  poll_interval_overridden: boolean;
  stuck_threshold_secs: number;
  sla_secs: number;
  delivery_retention_days: number;
  /** Which outcomes reach the desktop: a comma-separated subset of succeeded, failed, canceled, stuck. */
  notify_on: string;
  providers: Record<string, ProviderSettings>;
  /** Stored tunnel settings by key (`tunnel`, `tunnel.public_url`, ...); a variable may beat them. */
  tunnel?: Record<string, string | null>;
}

/** Keys whose values are whole numbers. */
const NUMERIC = /^(poll_interval_secs|stuck_threshold_secs(\..+)?|sla_secs|delivery_retention_days|tunnel\.self_test_quiet_secs)$/;

/** The form: every value as typed (strings), keyed as PUT /api/settings names them. */
export type Draft = Record<string, string>;

export function draftOf(s: SettingsView): Draft {
  const d: Draft = {
    poll_interval_secs: String(s.poll_interval_secs),
    stuck_threshold_secs: String(s.stuck_threshold_secs),
    sla_secs: String(s.sla_secs),
    delivery_retention_days: String(s.delivery_retention_days),
    notify_on: s.notify_on ?? "",
  };
  for (const [name, p] of Object.entries(s.providers)) {
    d[`${name}.base_url`] = p.base_url ?? "";
    d[`stuck_threshold_secs.${name}`] = p.stuck_threshold_secs === null ? "" : String(p.stuck_threshold_secs);
    if (p.discover) d[`${name}.discover`] = p.discover;
  }
  for (const [key, value] of Object.entries(s.tunnel ?? {})) {
    d[key] = value ?? "";
  }
  return d;
}

/**
 * The changes to send: fields whose text differs from what was loaded. Whole numbers go as
 * numbers, anything else as typed, so the server's message names the problem ("must be a whole
 * number of seconds"). A per-provider threshold left empty is not sent (the general one applies).
 */
export function changes(loaded: Draft, draft: Draft): Record<string, string | number> {
  const out: Record<string, string | number> = {};
  for (const [key, value] of Object.entries(draft)) {
    if (loaded[key] === value) continue;
    const trimmed = value.trim();
    if (!NUMERIC.test(key)) {
      out[key] = trimmed;
    } else if (trimmed === "" && (key.startsWith("stuck_threshold_secs.") || key.startsWith("tunnel."))) {
      continue;
    } else {
      out[key] = /^\d+$/.test(trimmed) ? Number(trimmed) : trimmed;
    }
  }
  return out;
}

/** A webhook secret for the generic provider: 32 random bytes, hex, with a recognisable prefix. */
export function newSecret(random: (bytes: Uint8Array) => Uint8Array = (b) => crypto.getRandomValues(b)): string {
  const bytes = random(new Uint8Array(32));
  return `nmsec_${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}
