// The frame: navigation, the connection state, the simulation banner and the warnings that
// must be seen from every screen; then the screen the URL fragment names. The keyboard's frame
// too: the shortcuts (`?` lists them), and the focus put on a new screen's heading.

import { useEffect, useRef, useState } from "preact/hooks";

import { codeRefused, get, hasToken, setToken, whenToken, whenUnauthorized } from "../api";
import { failingChannelWarnings } from "../channels";
import type { MetricsHistory } from "../generated/MetricsHistory";
import { metricWarnings, notificationWarning, providerWarnings } from "../insights";
import { connection as connectionStore, info as infoStore, metrics as metricsStore, startLive } from "../live";
import { parseRoute, type Route, screenHref, screenKey } from "../route";
import { isField, type KeyState, readKey, START } from "../shortcuts";
import { useStore } from "../store";
import { useNow } from "./common";
import { Guide } from "./Guide";
import { JobDetail } from "./JobDetail";
import { Jobs } from "./Jobs";
import { Metrics } from "./Metrics";
import { Refused } from "./Refused";
import { Settings } from "./Settings";
import { ShortcutsDialog } from "./ShortcutsDialog";
import { TunnelPill, TunnelWarnings } from "./Tunnel";

function useRoute(): Route {
  const [route, setRoute] = useState(parseRoute(location.hash));
  useEffect(() => {
    const update = () => setRoute(parseRoute(location.hash));
    window.addEventListener("hashchange", update);
    // The fragment may have changed between the first render and this listener.
    update();
    return () => window.removeEventListener("hashchange", update);
  }, []);
  return route;
}

/**
 * After a navigation (not on the first screen, not when only the Jobs filters change), the new
 * screen's h1 takes the focus: a screen reader reads where the user is, and Tab goes on from the
 * top of the new screen rather than from a link that is gone.
 */
function useFocusOnNavigation(route: Route): void {
  const key = screenKey(route);
  const shown = useRef(key);
  useEffect(() => {
    if (shown.current === key) return;
    shown.current = key;
    document.querySelector<HTMLElement>("main h1")?.focus();
  }, [key]);
}

/** The app's keys (shortcuts.ts): `?` opens the list, `g` then a letter goes to a screen. */
function useShortcuts(openHelp: () => void): void {
  useEffect(() => {
    let state: KeyState = START;
    const onKey = (e: KeyboardEvent) => {
      // Keys in a modal dialog are the dialog's.
      if (e.defaultPrevented || document.querySelector('[aria-modal="true"]')) return;
      const read = readKey(state, { key: e.key, modified: e.ctrlKey || e.metaKey || e.altKey, inField: isField(e.target) });
      state = read.state;
      if (!read.action) return;
      e.preventDefault();
      if (read.action.kind === "help") openHelp();
      else location.hash = screenHref(read.action.screen);
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, []);
}

/** The last day's hourly counters, for "climbing" warnings on every screen. */
function useRecentHistory(): MetricsHistory | null {
  const metrics = useStore(metricsStore);
  const [history, setHistory] = useState<MetricsHistory | null>(null);
  const last = useRef(0);
  useEffect(() => {
    if (!metrics) return;
    const wait = Math.max(0, 10_000 - (Date.now() - last.current));
    const t = setTimeout(() => {
      last.current = Date.now();
      get<MetricsHistory>("/api/metrics/history?hours=24").then(setHistory).catch(() => {});
    }, wait);
    return () => clearTimeout(t);
  }, [metrics]);
  return history;
}

export function App() {
  const [authorized, setAuthorized] = useState(hasToken());
  useEffect(() => whenUnauthorized(() => setAuthorized(false)), []);
  // A token handed over later in the address (see main.tsx) or typed in the prompt.
  useEffect(() => {
    whenToken(() => setAuthorized(true));
    if (hasToken()) setAuthorized(true);
  }, []);
  if (!authorized) return <TokenPrompt onToken={() => setAuthorized(true)} />;
  return <Main />;
}

function Main() {
  const route = useRoute();
  const connection = useStore(connectionStore);
  const info = useStore(infoStore);
  const metrics = useStore(metricsStore);
  const history = useRecentHistory();
  const now = useNow(5_000);
  const pendingSince = useRef<number | null>(null);
  const [help, setHelp] = useState(false);
  useEffect(() => startLive(), []);
  useFocusOnNavigation(route);
  useShortcuts(() => setHelp(true));
  if (!metrics || metrics.notifications_pending === 0) pendingSince.current = null;
  else pendingSince.current ??= Date.now();

  const notify = notificationWarning(metrics, pendingSince.current, now);
  const warnings = [...providerWarnings(metrics), ...metricWarnings(metrics, history), ...(notify ? [notify] : [])];
  const running = (metrics?.jobs_by_state.running ?? 0) + (metrics?.jobs_by_state.queued ?? 0);
  useEffect(() => {
    document.title = running > 0 ? `NeverMiss (${running} running)` : "NeverMiss";
  }, [running]);
  const tab = route.screen === "job" ? "jobs" : route.screen;

  return (
    <div class="app">
      <header class="topbar">
        <a class="brand" href="#/jobs">
          <span class="logo" aria-hidden="true">◉</span> NeverMiss
        </a>
        <nav aria-label="Screens">
          <a href="#/jobs" class={tab === "jobs" ? "active" : ""} aria-current={tab === "jobs" ? "page" : undefined} data-testid="nav-jobs">
            Jobs{running > 0 && <span class="nav-count" title="queued or running">{running}</span>}
          </a>
          <a href="#/metrics" class={tab === "metrics" ? "active" : ""} aria-current={tab === "metrics" ? "page" : undefined} data-testid="nav-metrics">
            Metrics{warnings.length > 0 && <span class="nav-dot" title={`${warnings.length} warnings`} />}
          </a>
          <a href="#/refused" class={tab === "refused" ? "active" : ""} aria-current={tab === "refused" ? "page" : undefined} data-testid="nav-refused" title="Requests the receiver refused, and why">
            Refused
          </a>
          <a href="#/settings" class={tab === "settings" ? "active" : ""} aria-current={tab === "settings" ? "page" : undefined} data-testid="nav-settings">
            Settings
          </a>
          <a href="#/start" class={tab === "start" ? "active" : ""} aria-current={tab === "start" ? "page" : undefined} data-testid="nav-start">
            Get started
          </a>
        </nav>
        <TunnelPill />
        <span class={`conn conn-${connection}`} data-testid="connection" title="The live connection to the engine">
          {connection === "live" ? "● live" : connection === "connecting" ? "connecting…" : "reconnecting…"}
        </span>
        <button
          type="button"
          class="btn small keys-button"
          aria-label="Keyboard shortcuts"
          title="Keyboard shortcuts (?)"
          aria-haspopup="dialog"
          data-testid="shortcuts-open"
          onClick={() => setHelp(true)}
        >
          ?
        </button>
      </header>
      <aside class="alerts" aria-label="Warnings">
        {info?.simulation && (
          <div class="banner simulation" data-simulation="" data-testid="simulation-banner">
            <b>Simulation.</b> These jobs come from NeverMiss's built-in simulated provider (<code>nevermiss demo</code>), not a real cloud.
          </div>
        )}
        <div class="warnings-strip">
          <TunnelWarnings />
          {failingChannelWarnings(metrics).map((w) => (
            <a href="#/settings" class={`strip-item strip-${w.level}`} data-warning={w.id} data-testid="channel-warning" title={w.text}>
              ⚠ {w.title}
            </a>
          ))}
        </div>
        {tab !== "metrics" && warnings.length > 0 && (
          <div class="warnings-strip" data-testid="warnings-strip">
            {warnings.map((w) => (
              <a href="#/metrics" class={`strip-item strip-${w.level}`} data-provider-warning={w.id.startsWith("provider:") ? w.id.slice(9) : undefined} data-warning={w.id}>
                ⚠ {w.title}
              </a>
            ))}
          </div>
        )}
      </aside>
      <main>
        {route.screen === "jobs" && <Jobs filters={route} />}
        {route.screen === "job" && <JobDetail provider={route.provider} jobId={route.jobId} askCancel={route.ask === "cancel"} />}
        {route.screen === "metrics" && <Metrics />}
        {route.screen === "settings" && <Settings />}
        {route.screen === "refused" && <Refused />}
        {route.screen === "start" && <Guide />}
      </main>
      {help && <ShortcutsDialog onClose={() => setHelp(false)} />}
    </div>
  );
}

function TokenPrompt({ onToken }: { onToken: () => void }) {
  const refusedCode = useStore(codeRefused);
  const [value, setValue] = useState("");
  const [error, setError] = useState("");
  const submit = async (e: Event) => {
    e.preventDefault();
    setToken(value.trim());
    try {
      await get("/api/health");
      onToken();
    } catch {
      setToken(null);
      setError("That token was refused. Copy it again from the data dir's api-token file, or use nevermiss open.");
    }
  };
  return (
    <main class="token-prompt" data-testid="token-prompt">
      <h1>
        <span class="logo" aria-hidden="true">◉</span> NeverMiss
      </h1>
      {refusedCode && (
        <p class="field-error" role="alert" data-testid="code-expired">
          This link was already used or has expired: a link from <code>nevermiss open</code> works once, within a minute. Run{" "}
          <code>nevermiss open</code> again for a new one.
        </p>
      )}
      <p>
        This page needs the API token of the running NeverMiss. The easiest way in: run <code>nevermiss open</code>, which opens this page
        with the token in the address.
      </p>
      <form onSubmit={submit}>
        <label>
          <span>
            Or paste the token (from <code>~/.local/share/nevermiss/api-token</code>, or <code>api-token</code> in your data dir)
          </span>
          <input type="password" value={value} onInput={(e) => setValue((e.target as HTMLInputElement).value)} autocomplete="off" />
        </label>
        <button class="btn primary" type="submit" disabled={!value.trim()}>
          Open
        </button>
        {error && <p class="field-error">{error}</p>}
      </form>
    </main>
  );
}
