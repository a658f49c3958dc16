// Settings: polling, thresholds and retention (applied at once, no restart), each provider's
// API address, and its secrets (stored by the engine's secret store, never shown again).

import { useEffect, useState } from "preact/hooks";

import { ApiError, errorText, get, saveRefusal, send } from "../api";
import * as format from "../format";
import type { ProviderList } from "../generated/ProviderList";
import type { SecretsView } from "../generated/SecretsView";
import type { SecretStatus } from "../generated/SecretStatus";
import type { HealthStatus } from "../generated/HealthStatus";
import { info as infoStore, metrics as metricsStore, refreshInfo } from "../live";
import { useStore } from "../store";
import {
  changes,
  type Draft,
  draftOf,
  isDuration,
  newSecret,
  type SettingsView,
  soundOptions,
  storageText,
  webhookSecretHint,
  webhookUrl,
} from "../settings";
import { Appearance } from "./Appearance";
import { ChannelsCard } from "./Channels";
import { CopyButton, Notice } from "./common";
import { HubCard } from "./Hub";
import { TUNNEL_KINDS, TunnelCredential, TunnelStatusCard } from "./Tunnel";
import type { CredentialState } from "../generated/CredentialState";

export function Settings() {
  const metrics = useStore(metricsStore);
  const instance = useStore(infoStore);
  const [loaded, setLoaded] = useState<SettingsView | null>(null);
  const [draft, setDraft] = useState<Draft>({});
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [saving, setSaving] = useState(false);
  const [saved, setSaved] = useState("");
  const [error, setError] = useState("");
  const [secrets, setSecrets] = useState<SecretsView | null>(null);
  const [secretsError, setSecretsError] = useState("");
  const [credentials, setCredentials] = useState<Record<string, { set: boolean; source: string | null }> | null>(null);
  const [refusedRecipes, setRefusedRecipes] = useState<string[]>([]);

  const load = async () => {
    get<SecretsView>("/api/secrets")
      .then(setSecrets)
      .catch((e) => setSecretsError(errorText(e)));
    get<ProviderList>("/api/providers")
      .then((list) => setRefusedRecipes(list.refused_recipes))
      .catch(() => {});
    get<Record<string, CredentialState>>("/api/tunnel/credentials")
      .then(setCredentials)
      .catch(() => {});
    try {
      const s = await get<SettingsView>("/api/settings");
      setLoaded(s);
      setDraft(draftOf(s));
    } catch (e) {
      setError(errorText(e));
    }
  };
  useEffect(() => void load(), []);

  if (!loaded) {
    return (
      <section class="screen settings">
        <h1 tabIndex={-1}>Settings</h1>
        <Appearance />
        {error ? <Notice level="error" title="Cannot load the settings">{error}</Notice> : <p class="muted">Loading…</p>}
      </section>
    );
  }

  /** A key saved may have turned discovery on: the choice shown follows, the rest of the draft stays. */
  const secretsSaved = (provider: string, v: SecretsView) => {
    setSecrets(v);
    if (!v.discovery_note) return;
    get<SettingsView>("/api/settings")
      .then((s) => {
        setLoaded(s);
        const key = `${provider}.discover`;
        setDraft((d) => ({ ...d, [key]: draftOf(s)[key] }));
      })
      .catch(() => {});
  };

  const base = draftOf(loaded);
  const pending = changes(base, draft);
  const dirty = Object.keys(pending).length > 0;

  const save = async (e: Event) => {
    e.preventDefault();
    setSaving(true);
    setSaved("");
    setError("");
    try {
      const s = await send<SettingsView>("PUT", "/api/settings", pending);
      setLoaded(s);
      setDraft(draftOf(s));
      setErrors({});
      setSaved("Saved. The changes apply now.");
      void refreshInfo().catch(() => {});
    } catch (err) {
      const refusal = saveRefusal(err);
      setErrors(refusal.fields);
      setError(refusal.message);
    } finally {
      setSaving(false);
    }
  };

  // A duration field (`isDuration`) takes what people write: 90s, 30m, 6h, 3d, or plain seconds.
  const field = (key: string, labelText: string, hint: string, opts: { unit?: string; disabled?: boolean; placeholder?: string; wide?: boolean } = {}) => {
    const human = isDuration(key) ? " Write it as 90s, 30m, 6h or 3d." : "";
    return (
      <div class={`field ${errors[key] ? "has-error" : ""} ${opts.wide ? "wide" : ""}`} data-field={key}>
        <label for={`f-${key}`}>{labelText}</label>
        <div class="input-row">
          <input
            id={`f-${key}`}
            name={key}
            value={draft[key] ?? ""}
            disabled={opts.disabled}
            placeholder={opts.placeholder}
            inputMode={opts.unit ? "numeric" : undefined}
            aria-invalid={!!errors[key]}
            aria-describedby={`e-${key}`}
            onInput={(e) => {
              setDraft({ ...draft, [key]: (e.target as HTMLInputElement).value });
              setSaved("");
              if (errors[key]) {
                const rest = { ...errors };
                delete rest[key];
                setErrors(rest);
              }
            }}
          />
          {opts.unit && <span class="unit">{opts.unit}</span>}
        </div>
        {errors[key] ? (
          <p class="field-error" id={`e-${key}`} data-testid={`error-${key}`}>
            {errors[key]}
          </p>
        ) : (
          <p class="hint" id={`e-${key}`}>
            {hint}
            {human}
          </p>
        )}
      </div>
    );
  };

  // `shown` is the option shown while nothing is stored (the engine's default).
  const choice = (key: string, labelText: string, hint: string, options: { value: string; label: string }[], wide = true, shown = "") => (
    <div class={`field ${wide ? "wide" : ""} ${errors[key] ? "has-error" : ""}`} data-field={key}>
      <label for={`f-${key}`}>{labelText}</label>
      <select
        id={`f-${key}`}
        name={key}
        value={draft[key] || shown}
        onChange={(e) => {
          setDraft({ ...draft, [key]: (e.target as HTMLSelectElement).value });
          setSaved("");
        }}
      >
        {options.map((o) => (
          <option value={o.value}>{o.label}</option>
        ))}
      </select>
      {errors[key] ? (
        <p class="field-error" data-testid={`error-${key}`}>
          {errors[key]}
        </p>
      ) : (
        <p class="hint">{hint}</p>
      )}
    </div>
  );

  // The providers set up (a key, a secret or discovery) first, the others folded away.
  const providers = Object.keys(loaded.providers);
  const isConfigured = (p: string) => {
    const s = secrets?.providers[p];
    const anySecret = !!s && (s.api_key.set || s.webhook_secret.set || Object.values(s.named).some((n) => n.set));
    return anySecret || loaded.providers[p].discover === "on" || !!loaded.providers[p].base_url;
  };
  const configured = providers.filter(isConfigured);
  const others = providers.filter((p) => !isConfigured(p));
  const providerBlock = (p: string) => (
            <div class="provider-block" data-provider={p}>
              <h3>
                {providerName(p)} <PollingHealth status={metrics?.providers[p]?.status} message={metrics?.providers[p]?.message ?? null} />
              </h3>
              <div class="fields">
                {field(`${p}.base_url`, "API address", p === "generic" ? "Your sender's status API (GET {address}/jobs/{id})." : "The provider's API.", {
                  placeholder: p === "generic" ? "https://my-agent.example/api" : "default",
                  wide: true,
                })}
                {field(`stuck_threshold_secs.${p}`, "Stuck after (this provider)", "Empty: the general value above.", {
                  placeholder: loaded.durations.stuck_threshold_secs ?? String(loaded.stuck_threshold_secs),
                })}
                {loaded.providers[p].account !== undefined &&
                  field(
                    `${p}.account`,
                    "Your account",
                    loaded.providers[p].account_for === "discovery"
                      ? `The account whose jobs discovery lists: your ${providerName(p)} account id (as in accounts/<id>/…).`
                      : "Only webhooks for this account are taken (fal signs every customer's webhooks with the same keys): your user id, as in X-Fal-Webhook-User-Id. Empty: learned from the first webhook of a request you tracked with its status URL.",
                    { placeholder: "not known yet", wide: true },
                  )}
                {loaded.providers[p].discover &&
                  choice(
                    `${p}.discover`,
                    "Discover jobs",
                    "On: every job of the account is watched, wherever it was started (listed at each polling pass with the API key); turned on, it takes in the jobs of the last week still running, not the finished ones. On by default once the API key is set here. Off: only tracked and webhooked jobs (an account you share).",
                    [
                      { value: "off", label: "Off: tracked and webhooked jobs only" },
                      { value: "on", label: "On: every job of the account" },
                    ],
                    true,
                    "off",
                  )}
              </div>
              {secrets && secrets.providers[p] && <ProviderSecretFields provider={p} view={secrets} onSaved={(v) => secretsSaved(p, v)} />}
            </div>
  );
  const kind = draft.tunnel || "none";
  return (
    <section class="screen settings" data-testid="settings-screen">
      <h1 tabIndex={-1}>Settings</h1>
      <nav class="settings-sections" aria-label="Settings sections" data-testid="settings-sections">
        <a href="#settings-polling">Polling and alerts</a>
        <a href="#settings-providers">Providers</a>
        {loaded.tunnel && <a href="#settings-tunnel">Tunnel</a>}
        <a href="#settings-channels">Channels</a>
        <a href="#settings-hub">Hub</a>
        <a href="#settings-appearance">Appearance</a>
      </nav>
      <div id="settings-appearance">
        <Appearance />
      </div>
      <form onSubmit={save} noValidate>
        <div class="card" id="settings-polling">
          <h2>Polling and alerts</h2>
          <div class="fields">
            {field(
              "poll_interval_secs",
              "Polling interval",
              loaded.poll_interval_overridden
                ? "Set by --poll-interval or NEVERMISS_POLL_INTERVAL for this run; a saved value applies once that is gone."
                : "How often unfinished jobs are checked with their provider. At least 5 seconds.",
            )}
            {field("stuck_threshold_secs", "Stuck after", "An unfinished job older than this raises one stuck alert, until its kind has 10 finished jobs: then it is \"slower than usual\" past 1.5 × the 95th percentile of their durations instead.")}
            {field("sla_secs", "SLA", "A job that takes longer than this from its start (the provider's, else first seen) to finished counts as an SLA breach.")}
            {field(
              "ui_url",
              "Links in notifications",
              "Where a notification's link opens the job: a hub's public address, so a phone or a teammate can follow it. Empty: this machine. Which outcomes each channel announces is set per channel, below.",
              { wide: true, placeholder: "this machine" },
            )}
            {choice(
              "group_members",
              "A grouped job's own notification",
              "A group's end is always one notification (\u201csweep-7 done: 38 succeeded, 2 failed\u201d). Besides it, a job of the group is announced on its own: never, at once when it fails or needs input, or always.",
              [
                { value: "group", label: "Never: only the group's" },
                { value: "failures", label: "When it fails or needs input" },
                { value: "every", label: "Always" },
              ],
            )}
            {field(
              "group_end_grace_secs",
              "A group's end waits",
              "Before a group's end is announced: a job that joins the group meanwhile (a sweep still being started) is waited for too, so the summary counts every job. 0: at once.",
            )}
            {choice(
              "sound_urgent",
              "Sound of an urgent notification",
              "On this desktop, for a job that failed, needs input or is stuck (a sound name of the desktop's sound theme). Off: NeverMiss asks for no sound.",
              soundOptions(loaded.sound_urgent),
              false,
              "off",
            )}
            {choice(
              "sound_normal",
              "Sound of the others",
              "On this desktop, for a job that succeeded or was canceled. Off: NeverMiss asks for no sound.",
              soundOptions(loaded.sound_normal),
              false,
              "off",
            )}
            {field(
              "abandon_after_secs",
              "Stop polling a 404 job after",
              "A job its provider answers 404 for at every poll (at least 3) for this long is abandoned: one alert, no more polls; a webhook still finishes it. 0: after 3 polls. Jobs that cannot be polled at all (no status URL, an eval run) are abandoned at once.",
            )}
            {field(
              "provider_timeout_secs",
              "A provider's answer may take",
              "One request to a provider (a poll, a listing, a cancel) waits this long before it counts as a timeout. At most 10 minutes.",
            )}
            {field("delivery_retention_days", "Keep deliveries for", "Raw requests are kept this long for inspection and dedupe; finished jobs' timelines are then reduced to their first and last events. At least 7 days.", {
              unit: "days",
            })}
            {field("job_retention_days", "Keep finished jobs for", "Then they are archived (removed with their timeline); counters and SLA figures stay. At least the delivery retention.", {
              unit: "days",
            })}
            {choice(
              "devices_may_cancel",
              "Devices may cancel jobs",
              "For a hub: whether the machines connected to it with a device token may ask it to cancel a job (the provider's own cancel). Off: only you, on this machine.",
              [
                { value: "off", label: "Off: only the owner cancels" },
                { value: "on", label: "On: devices may cancel too" },
              ],
              true,
              "off",
            )}
            {choice(
              "devices_may_read_bodies",
              "Devices may read bodies",
              "For a hub: whether the machines connected to it with a device token may read the bodies of kept deliveries and refused requests (what a provider sent, credentials masked). Off: they see headers and reasons only.",
              [
                { value: "off", label: "Off: only the owner reads bodies" },
                { value: "on", label: "On: devices read them too" },
              ],
              true,
              "off",
            )}
          </div>
        </div>

        <div class="card" id="settings-providers">
          <h2>Providers</h2>
          <p class="muted small">
            Leave an API address empty to use the provider's own (set it to point a provider at a local stand-in). Keys and secrets are
            saved on their own, at once, {secrets?.store === "file" ? "in a file only you can read" : "in the OS keychain"}; never in the
            database, the logs or this page: once saved, a secret only shows as set.
          </p>
          {secrets?.store === "file" && (
            <Notice level="info" title="No OS keychain here" testId="secret-store-file">
              {secrets.store_note ? `${secrets.store_note}. ` : ""}Keys and secrets are kept in <code>secrets.json</code> in the data dir,
              readable by you only (mode 0600).{" "}
              <button
                type="button"
                class="btn small link"
                data-testid="retry-keychain"
                onClick={() =>
                  send<SecretsView>("POST", "/api/secrets/retry-keychain")
                    .then(setSecrets)
                    .catch((e) => setSecretsError(errorText(e)))
                }
              >
                Try the keychain again
              </button>
            </Notice>
          )}
          {refusedRecipes.length > 0 && (
            <Notice level="warn" title="Recipes not loaded" testId="refused-recipes">
              <p>These files in the data dir's providers folder were refused when NeverMiss started; fix them and restart:</p>
              <ul>
                {refusedRecipes.map((line) => (
                  <li>
                    <code>{format.visible(line)}</code>
                  </li>
                ))}
              </ul>
            </Notice>
          )}
          {configured.map(providerBlock)}
          {others.length > 0 && (
            <details class="other-providers" data-testid="other-providers" open={configured.length === 0}>
              <summary>
                {configured.length === 0 ? "Providers" : "Other providers"} ({others.length}): no key or secret set yet
              </summary>
              {others.map(providerBlock)}
            </details>
          )}
          {secretsError && <Notice level="error" title="Cannot read which secrets are set">{secretsError}</Notice>}
        </div>

        {loaded.tunnel && (
          <div class="card" data-testid="tunnel-card" id="settings-tunnel">
            <h2>Tunnel</h2>
            <p class="muted small">
              Carries providers' webhooks from the internet to the receiver. Without one, NeverMiss still learns every job's end by polling,
              only later. <code>NEVERMISS_TUNNEL</code> and the other variables beat what is saved here.
            </p>
            <TunnelStatusCard />
            <div class="fields">
              {choice("tunnel", "Kind", "Saving restarts the tunnel with the new settings.", TUNNEL_KINDS, true, "none")}
              {kind === "cloudflared" && (
                <>
                  {field("tunnel.cloudflared_hostname", "Hostname (named tunnel)", "Empty: a quick tunnel on a random trycloudflare.com name, new at each start.", {
                    placeholder: "hooks.example.com",
                  })}
                  {field("tunnel.cloudflared_path", "cloudflared program", "Empty: cloudflared on the PATH.", { placeholder: "cloudflared" })}
                </>
              )}
              {kind === "ngrok" && (
                <>
                  {field("tunnel.ngrok_domain", "Domain", "Your reserved ngrok domain, so the URL stays the same. Empty: a random one.", {
                    placeholder: "my-hooks.ngrok.app",
                  })}
                  {field("tunnel.ngrok_path", "ngrok program", "Empty: ngrok on the PATH.", { placeholder: "ngrok" })}
                </>
              )}
              {kind === "bore" && field("tunnel.bore_server", "bore server", "host or host:port of the bore server.", { placeholder: "bore.example.com" })}
              {kind === "manual" && field("tunnel.public_url", "Public URL", "The https address that forwards to the receiver.", { placeholder: "https://hooks.example.com", wide: true })}
              {kind !== "none" &&
                choice("tunnel.self_test", "Self-test", "A signed delivery sent through the public URL after each start and when webhooks are quiet.", [
                  { value: "", label: "On (default)" },
                  { value: "on", label: "On" },
                  { value: "off", label: "Off" },
                ], false)}
            </div>
            {credentials && kind === "cloudflared" && (
              <div class="fields">
                <TunnelCredential name="cloudflared_token" label="Tunnel token (named tunnel)" hint="From the Cloudflare dashboard; not needed for a quick tunnel." state={credentials.cloudflared_token} onSaved={setCredentials} />
              </div>
            )}
            {credentials && kind === "ngrok" && (
              <div class="fields">
                <TunnelCredential name="ngrok_authtoken" label="Authtoken" hint="From the ngrok dashboard." state={credentials.ngrok_authtoken} onSaved={setCredentials} />
              </div>
            )}
            {credentials && kind === "bore" && (
              <div class="fields">
                <TunnelCredential name="bore_secret" label="bore secret" hint="Only if the server asks for one." state={credentials.bore_secret} onSaved={setCredentials} />
              </div>
            )}
          </div>
        )}

        {instance && (
          <div class="card" data-testid="storage-card">
            <h2>Storage</h2>
            <p class="muted small">{storageText(instance)}</p>
          </div>
        )}

        <div class="save-bar">
          <button class="btn primary" type="submit" disabled={saving || !dirty} data-testid="save-settings">
            {saving ? "Saving…" : "Save settings"}
          </button>
          {dirty && !saving && (
            <button type="button" class="btn" onClick={() => (setDraft(base), setErrors({}), setError(""))}>
              Discard changes
            </button>
          )}
          {saved && (
            <span class="ok-text" data-testid="settings-saved">
              {saved}
            </span>
          )}
          {error && (
            <span class="bad-text" data-testid="settings-error">
              {error}
            </span>
          )}
        </div>
      </form>

      <div id="settings-channels">
        <ChannelsCard />
      </div>
      <div id="settings-hub">
        <HubCard />
      </div>
    </section>
  );
}

const HEALTH_TEXT: Record<HealthStatus, string> = {
  ok: "polling works",
  not_configured: "polling off",
  misconfigured: "key refused",
  rate_limited: "rate limited",
  no_status_api: "no status API",
  by_hub: "polled by the hub",
};

/** How polling this provider went last (from the metrics), next to its name. */
export function PollingHealth({ status, message }: { status: HealthStatus | undefined; message: string | null }) {
  if (!status) return null;
  return (
    <span class={`health health-${status}`} title={message ?? undefined} data-health={status}>
      {HEALTH_TEXT[status] ?? status}
      {message && status !== "ok" ? `: ${message}` : ""}
    </span>
  );
}

/** The display name of a provider. */
export function providerName(p: string): string {
  const names: Record<string, string> = {
    generic: "Generic (your own sender)",
    openai: "OpenAI",
    anthropic: "Anthropic",
    replicate: "Replicate",
    fal: "fal",
    gemini: "Gemini",
    runpod: "RunPod",
    together: "Together AI",
    huggingface: "Hugging Face",
    groq: "Groq",
    mistral: "Mistral",
    fireworks: "Fireworks",
    cursor: "Cursor",
  };
  return names[p] ?? p;
}

/** One provider's webhook secret, API key and named secrets: whether each is set, and setting them. */
export function ProviderSecretFields({ provider, view, onSaved: saved }: { provider: string; view: SecretsView; onSaved: (v: SecretsView) => void }) {
  // What setting the key did to discovery (turned on by default, or what it still needs): said once, here.
  const [discoveryNote, setDiscoveryNote] = useState<string | null>(null);
  const s = view.providers[provider];
  if (!s) return null;
  const intake = s.webhooks;
  const onSaved = (v: SecretsView) => {
    if (v.discovery_note) setDiscoveryNote(v.discovery_note);
    saved(v);
  };
  return (
    <div class="fields" data-secrets={provider}>
      {discoveryNote && (
        <Notice level="info" title="Every job of the account" testId={`discovery-note-${provider}`}>
          {discoveryNote}
        </Notice>
      )}
      {intake === "none" || intake === "platform_keys" ? (
        <div class="field" data-webhooks={intake}>
          <label>Webhook secret</label>
          <p class="hint">{webhookSecretHint(provider, intake)}</p>
        </div>
      ) : (
        <SecretField
          provider={provider}
          field="webhook_secret"
          label="Webhook secret"
          hint={webhookSecretHint(provider, intake)}
          generates={provider === "generic" || intake === "url_token"}
          tokenUrl={intake === "url_token"}
          status={s.webhook_secret}
          onSaved={onSaved}
        />
      )}
      <SecretField
        provider={provider}
        field="api_key"
        label="API key"
        hint={provider === "generic" ? "Sent as Bearer to your status API when polling." : "Used to poll the provider for job states."}
        status={s.api_key}
        onSaved={onSaved}
      />
      {Object.entries(s.named).map(([name, status]) => (
        <SecretField
          provider={provider}
          field={`named.${name}`}
          label={`Secret ${name}`}
          hint={`Named {secret.${name}} by the recipe (or NEVERMISS_${provider.toUpperCase().replace(/-/g, "_")}_${name.toUpperCase()}).`}
          status={status}
          onSaved={onSaved}
        />
      ))}
    </div>
  );
}

/** The body of PUT /api/secrets/{provider} that sets (or, with null, forgets) one field. */
function secretUpdate(field: string, value: string | null): Record<string, unknown> {
  return field.startsWith("named.") ? { named: { [field.slice("named.".length)]: value } } : { [field]: value };
}

function SecretField({
  provider,
  field,
  label,
  hint,
  generates = false,
  tokenUrl = false,
  status,
  onSaved,
}: {
  provider: string;
  /** `api_key`, `webhook_secret` or `named.<name>`. */
  field: string;
  label: string;
  hint: string;
  /** Offers to generate the secret (the user's own sender, a URL token). */
  generates?: boolean;
  /** The secret is a token in the webhook URL: the URL to paste is shown with it once generated. */
  tokenUrl?: boolean;
  status: SecretStatus;
  onSaved: (v: SecretsView) => void;
}) {
  const info = useStore(infoStore);
  const [editing, setEditing] = useState(false);
  const [value, setValue] = useState("");
  const [generated, setGenerated] = useState(false);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);

  /** A call to the API, the buttons disabled while it runs; its failure shown in words (`errorOf`). */
  const calling = async (call: () => Promise<void>, errorOf: (e: unknown) => string = errorText) => {
    setBusy(true);
    setError("");
    try {
      await call();
    } catch (e) {
      setError(errorOf(e));
    } finally {
      setBusy(false);
    }
  };

  const put = (v: string | null) =>
    calling(
      async () => {
        onSaved(await send<SecretsView>("PUT", `/api/secrets/${encodeURIComponent(provider)}`, secretUpdate(field, v)));
        setEditing(false);
        setValue("");
        setGenerated(false);
      },
      (e) => (e instanceof ApiError ? (e.fields[field] ?? e.message) : errorText(e)),
    );

  const generate = () => {
    setValue(newSecret());
    setGenerated(true);
    setEditing(true);
  };

  const fetchFromReplicate = () => calling(async () => onSaved(await send<SecretsView>("POST", "/api/secrets/replicate/fetch", {})));

  const key = `${provider}.${field}`;
  const pasteUrl = tokenUrl && generated && info ? webhookUrl(info.public_url ?? info.receiver_url, provider, "url_token", value) : null;
  const inputProps = {
    id: `s-${key}`,
    class: "mono",
    autocomplete: "off",
    spellcheck: false,
    value,
    placeholder: label,
    onInput: (e: Event) => setValue((e.target as HTMLInputElement).value),
    // Enter saves this secret, not the settings form around it.
    onKeyDown: (e: KeyboardEvent) => {
      if (e.key === "Enter") {
        e.preventDefault();
        if (value) void put(value);
      }
    },
  };
  return (
    <div class={`field ${error ? "has-error" : ""}`} data-secret={key}>
      <label for={`s-${key}`}>{label}</label>
      {!editing ? (
        <div class="input-row">
          <span class={`secret-state ${status.set ? "set" : ""}`} data-testid={`secret-${key}`}>
            {status.set ? `${status.masked} set` : "not set"}
            {status.from_env ? " (from the environment)" : status.source === "file" ? " (in the 0600 file)" : ""}
          </span>
          <button type="button" class="btn small" onClick={() => setEditing(true)}>
            {status.set ? "Replace" : "Set"}
          </button>
          {generates && (
            <button type="button" class="btn small" data-testid="generate-secret" onClick={generate}>
              {status.set ? "Rotate" : "Generate"}
            </button>
          )}
          {provider === "replicate" && field === "webhook_secret" && (
            <button
              type="button"
              class="btn small"
              data-testid="fetch-replicate-secret"
              disabled={busy}
              title="Ask Replicate for it with the API key"
              onClick={fetchFromReplicate}
            >
              Fetch from Replicate
            </button>
          )}
          {status.set && !status.from_env && (
            <button type="button" class="btn small link" disabled={busy} onClick={() => void put(null)}>
              Remove
            </button>
          )}
        </div>
      ) : (
        <div class="input-row">
          {generated ? <input type="text" {...inputProps} /> : <input type="password" {...inputProps} />}
          {generated && <CopyButton text={value} />}
          <button type="button" class="btn small primary" disabled={busy || !value} onClick={() => void put(value)} data-testid={`save-secret-${key}`}>
            Save
          </button>
          <button type="button" class="btn small link" onClick={() => (setEditing(false), setValue(""), setGenerated(false), setError(""))}>
            Cancel
          </button>
        </div>
      )}
      {error ? (
        <p class="field-error">{error}</p>
      ) : (
        <p class="hint">
          {generated ? "Copy it now for your sender: after saving it is not shown again. " : ""}
          {hint}
        </p>
      )}
      {pasteUrl && (
        <div class="url-box">
          <code data-testid={`token-url-${provider}`}>{pasteUrl}</code>
          <CopyButton text={pasteUrl} />
        </div>
      )}
    </div>
  );
}
