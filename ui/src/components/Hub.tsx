// Settings, "Hub": this app as a device of a NeverMiss hub (GET/PUT /api/hub). An engine that
// does not serve it yet (404) shows the card as unavailable. The logic is in hub.ts.

import { useEffect, useState } from "preact/hooks";

import { ApiError, errorText, get, NOTHING_SAVED, saveRefusal, send } from "../api";
import { DISCONNECT, type HubForm, hubFormOf, hubInputOf, type HubState, hubStatus } from "../hub";
import { Notice } from "./common";

export function HubCard() {
  const [state, setState] = useState<HubState | null>(null);
  const [unavailable, setUnavailable] = useState(false);
  const [loadError, setLoadError] = useState("");
  const [form, setForm] = useState<HubForm>(hubFormOf(null));
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [error, setError] = useState("");
  const [done, setDone] = useState("");
  const [busy, setBusy] = useState(false);

  const loaded = (s: HubState) => {
    setState(s);
    setForm(hubFormOf(s));
    setErrors({});
  };

  useEffect(() => {
    get<HubState>("/api/hub")
      .then(loaded)
      .catch((e) => (e instanceof ApiError && e.status === 404 ? setUnavailable(true) : setLoadError(errorText(e))));
  }, []);

  const put = async (body: ReturnType<typeof hubInputOf>["input"], message: string) => {
    setBusy(true);
    setError("");
    setDone("");
    try {
      loaded(await send<HubState>("PUT", "/api/hub", body));
      setDone(message);
    } catch (e) {
      const refusal = saveRefusal(e);
      setErrors(refusal.fields);
      setError(refusal.message);
    } finally {
      setBusy(false);
    }
  };

  const submit = (e: Event) => {
    e.preventDefault();
    const { input, errors: local } = hubInputOf(form, state);
    if (Object.keys(local).length) {
      setErrors(local);
      setError(NOTHING_SAVED);
      return;
    }
    void put(input, "Saved. Connecting…");
  };

  const disconnect = () => {
    if (!confirm("Disconnect from the hub? This app then shows this machine's own jobs again.")) return;
    void put(DISCONNECT, "Disconnected.");
  };

  const edit = (key: keyof HubForm) => (e: Event) => {
    setForm({ ...form, [key]: (e.target as HTMLInputElement).value });
    setDone("");
    if (errors[key]) {
      const rest = { ...errors };
      delete rest[key];
      setErrors(rest);
    }
  };

  const status = state ? hubStatus(state) : null;
  return (
    <div class="card" data-testid="hub-card" data-available={String(!unavailable)}>
      <h2>Hub</h2>
      <p class="muted small">
        Connected to a NeverMiss hub, this app shows the hub's jobs and this machine shows the hub's notifications for it, once each, catching
        up after sleep. On the hub, <code>nevermiss devices add NAME</code> prints this device's token.
      </p>
      {unavailable && (
        <Notice level="info" title="Not available" testId="hub-unavailable">
          This NeverMiss does not offer a hub connection yet.
        </Notice>
      )}
      {loadError && (
        <Notice level="error" title="Cannot read the hub connection">
          {loadError}
        </Notice>
      )}
      {state && status && (
        <>
          <Notice level={status.level} testId="hub-status">
            {status.text}
          </Notice>
          <form onSubmit={submit} noValidate>
            <div class="fields">
              <div class={`field wide ${errors.url ? "has-error" : ""}`} data-field="hub-url">
                <label for="hub-url">Hub address</label>
                <input
                  id="hub-url"
                  name="url"
                  value={form.url}
                  placeholder="https://hub.example.com"
                  autocomplete="off"
                  spellcheck={false}
                  aria-invalid={!!errors.url}
                  aria-describedby="hub-url-e"
                  onInput={edit("url")}
                />
                {errors.url ? (
                  <p class="field-error" id="hub-url-e" data-testid="hub-error-url">
                    {errors.url}
                  </p>
                ) : (
                  <p class="hint" id="hub-url-e">
                    The hub's admin API, as this machine reaches it.
                  </p>
                )}
              </div>
              <div class={`field wide ${errors.token ? "has-error" : ""}`} data-field="hub-token">
                <label for="hub-token">Device token</label>
                <div class="input-row">
                  <span class={`secret-state ${state.token_set ? "set" : ""}`} data-testid="hub-token-state">
                    {state.token_set ? (form.token.trim() ? "set: replaced on save" : "set") : "not set"}
                  </span>
                  <input
                    id="hub-token"
                    name="token"
                    type="password"
                    class="mono"
                    value={form.token}
                    autocomplete="new-password"
                    spellcheck={false}
                    placeholder={state.token_set ? "unchanged" : "required"}
                    aria-invalid={!!errors.token}
                    aria-describedby="hub-token-e"
                    onInput={edit("token")}
                  />
                </div>
                {errors.token ? (
                  <p class="field-error" id="hub-token-e" data-testid="hub-error-token">
                    {errors.token}
                  </p>
                ) : (
                  <p class="hint" id="hub-token-e">
                    Kept in the secret store, never shown again.{state.token_set ? " Leave it empty to keep the stored one." : ""}
                  </p>
                )}
              </div>
            </div>
            <div class="input-row channel-actions">
              <button class="btn small primary" type="submit" disabled={busy} data-testid="save-hub">
                {busy ? "Saving…" : state.url ? "Save" : "Connect"}
              </button>
              {state.url && (
                <button type="button" class="btn small" disabled={busy} onClick={disconnect} data-testid="disconnect-hub">
                  Disconnect
                </button>
              )}
              {done && <span class="ok-text small">{done}</span>}
              {error && (
                <span class="bad-text small" data-testid="hub-error">
                  {error}
                </span>
              )}
            </div>
          </form>
        </>
      )}
    </div>
  );
}
