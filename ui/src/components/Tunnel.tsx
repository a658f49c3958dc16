// The tunnel that carries providers' webhooks to the receiver: whether it is up, its public
// URL, its last self-test, and the "the URL changed, update it at the providers" acknowledgement.

import { useState } from "preact/hooks";

import { errorText, send } from "../api";
import * as format from "../format";
import type { SelfTestReport } from "../generated/SelfTestReport";
import type { TunnelState } from "../generated/TunnelState";
import { refreshInfo, tunnel as tunnelStore } from "../live";
import { useStore } from "../store";
import { CopyButton, Notice } from "./common";
import type { CredentialState } from "../generated/CredentialState";

export const TUNNEL_KINDS = [
  { value: "none", label: "None: this machine only (polling still catches every job)" },
  { value: "cloudflared", label: "Cloudflare Tunnel (cloudflared): a quick tunnel, or a named one with a token" },
  { value: "ngrok", label: "ngrok: the ngrok agent with your authtoken" },
  { value: "bore", label: "bore: a bore server you run or trust" },
  { value: "manual", label: "Manual: your own proxy or port forward; give its public URL" },
];

const STATUS_TEXT: Record<string, string> = { off: "off", starting: "starting…", up: "up", down: "down" };

/** The pill in the top bar. */
export function TunnelPill() {
  const t = useStore(tunnelStore);
  if (!t) return null;
  const text = t.kind === "none" ? "no tunnel" : `tunnel ${STATUS_TEXT[t.status] ?? t.status}`;
  return (
    <a
      href="#/settings"
      class={`tunnel-pill tunnel-${t.kind === "none" ? "none" : t.status}`}
      data-testid="tunnel-pill"
      title={t.public_url ? `Webhooks arrive through ${t.public_url}` : "Providers on the internet cannot reach the receiver; polling still catches every job"}
    >
      {text}
    </a>
  );
}

/** What the user must act on: a changed URL (with the acknowledgement), or a tunnel that is down. */
export function TunnelWarnings() {
  const t = useStore(tunnelStore);
  const [busy, setBusy] = useState(false);
  if (!t) return null;
  const ack = async () => {
    setBusy(true);
    try {
      tunnelStore.set(await send<TunnelState>("POST", "/api/tunnel/ack"));
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      {t.url_changed && t.public_url && (
        <div class="strip-item strip-warn" data-testid="tunnel-url-changed">
          ⚠ The public URL changed to <code>{t.public_url}</code>: update the webhook URL at each provider.{" "}
          <button type="button" class="btn small" disabled={busy} onClick={ack}>
            Done, I updated them
          </button>
        </div>
      )}
      {t.warning && (
        <a href="#/settings" class="strip-item strip-error" data-testid="tunnel-warning">
          ⚠ Tunnel: {t.warning}
        </a>
      )}
    </>
  );
}

function SelfTest({ report }: { report: SelfTestReport }) {
  const level = report.outcome === "passed" ? "ok-text" : report.outcome === "failed" ? "bad-text" : "muted";
  return (
    <p class="small">
      Last self-test <span class={level}>{report.outcome}</span> {format.ago(report.at)}
      {report.round_trip_ms !== null && ` · round trip ${format.duration(report.round_trip_ms)}`}
      {report.reason && ` · ${report.reason}`}
    </p>
  );
}

/** The state and the actions (self-test, restart), for the Settings screen. */
export function TunnelStatusCard() {
  const t = useStore(tunnelStore);
  const [busy, setBusy] = useState("");
  const [error, setError] = useState("");
  if (!t) return <p class="muted">The tunnel's state is not known yet.</p>;

  const act = async (what: "test" | "restart") => {
    setBusy(what);
    setError("");
    try {
      if (what === "test") {
        const report = await send<SelfTestReport>("POST", "/api/tunnel/test");
        tunnelStore.set({ ...t, self_test: report });
      } else {
        tunnelStore.set(await send<TunnelState>("POST", "/api/tunnel/restart"));
      }
      void refreshInfo().catch(() => {});
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy("");
    }
  };

  return (
    <div class="tunnel-status" data-testid="tunnel-status">
      <div class="input-row">
        <span class={`tunnel-pill tunnel-${t.kind === "none" ? "none" : t.status}`}>
          {t.kind === "none" ? "no tunnel" : `${t.kind}: ${STATUS_TEXT[t.status] ?? t.status}`}
        </span>
        {t.public_url && (
          <>
            <code>{t.public_url}</code>
            <CopyButton text={t.public_url} />
          </>
        )}
        <span class="grow" />
        {t.kind !== "none" && (
          <>
            <button type="button" class="btn small" disabled={!!busy || t.status !== "up"} onClick={() => void act("test")}>
              {busy === "test" ? "Testing…" : "Run self-test"}
            </button>
            <button type="button" class="btn small" disabled={!!busy} onClick={() => void act("restart")}>
              Restart
            </button>
          </>
        )}
      </div>
      <p class="muted small">
        Forwards only to the receiver ({t.forwards_to}); the admin API and this page are never exposed.
        {t.since && ` ${STATUS_TEXT[t.status] ?? t.status} since ${format.dateTime(t.since)}.`}
        {t.restarts > 0 && ` ${t.restarts} restarts.`}
        {t.next_attempt_at && ` Next try at ${format.dateTime(t.next_attempt_at)}.`}
      </p>
      {t.last_error && <Notice level="error" title="Last error">{t.last_error}</Notice>}
      {t.notice && <Notice level="info">{t.notice}</Notice>}
      {t.self_test && <SelfTest report={t.self_test} />}
      {error && <Notice level="error">{error}</Notice>}
    </div>
  );
}


/** A tunnel secret (ngrok authtoken, cloudflared token, bore secret): set or not, never shown. */
export function TunnelCredential({
  name,
  label,
  hint,
  state,
  onSaved,
}: {
  name: string;
  label: string;
  hint: string;
  state: CredentialState | undefined;
  onSaved: (v: Record<string, CredentialState>) => void;
}) {
  const [editing, setEditing] = useState(false);
  const [value, setValue] = useState("");
  const [error, setError] = useState("");
  const put = async (v: string | null) => {
    setError("");
    try {
      onSaved(await send<Record<string, CredentialState>>("PUT", "/api/tunnel/credentials", { [name]: v }));
      setEditing(false);
      setValue("");
    } catch (e) {
      setError(errorText(e));
    }
  };
  return (
    <div class={`field ${error ? "has-error" : ""}`} data-credential={name}>
      <label for={`c-${name}`}>{label}</label>
      {editing ? (
        <div class="input-row">
          <input
            id={`c-${name}`}
            type="password"
            class="mono"
            autocomplete="off"
            value={value}
            onInput={(e) => setValue((e.target as HTMLInputElement).value)}
            onKeyDown={(e) => {
              if (e.key === "Enter") {
                e.preventDefault();
                if (value.trim()) void put(value.trim());
              }
            }}
          />
          <button type="button" class="btn small primary" disabled={!value.trim()} onClick={() => void put(value.trim())}>
            Save
          </button>
          <button type="button" class="btn small link" onClick={() => (setEditing(false), setValue(""))}>
            Cancel
          </button>
        </div>
      ) : (
        <div class="input-row">
          <span class={`secret-state ${state?.set ? "set" : ""}`}>
            {state?.set ? "•••••••• set" : "not set"}
            {state?.source === "env" ? " (from the environment)" : ""}
          </span>
          <button type="button" class="btn small" onClick={() => setEditing(true)}>
            {state?.set ? "Replace" : "Set"}
          </button>
          {state?.set && state.source !== "env" && (
            <button type="button" class="btn small link" onClick={() => void put(null)}>
              Remove
            </button>
          )}
        </div>
      )}
      {error ? <p class="field-error">{error}</p> : <p class="hint">{hint}</p>}
    </div>
  );
}
