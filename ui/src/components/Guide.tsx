// The guided start: pick a provider, give NeverMiss its secret, copy the webhook URL, then test
// it: a signed delivery seen arriving (generic), or one of the user's own jobs tracked and asked
// of the provider with the key just set (every other provider).

import { useEffect, useState } from "preact/hooks";

import { ApiError, errorText, get, send } from "../api";
import type { Job } from "../generated/Job";
import type { SecretsView } from "../generated/SecretsView";
import type { TestDelivery } from "../generated/TestDelivery";
import type { TrackAnswer } from "../generated/TrackAnswer";
import { info as infoStore, onJob } from "../live";
import { jobHref } from "../route";
import { useStore } from "../store";
import { CopyButton, Notice, SourceBadge, StateBadge } from "./common";
import { webhookUrl } from "../settings";
import { ProviderSecretFields, providerName } from "./Settings";
import { placeholder } from "./TrackForm";

const WHERE: Record<string, string> = {
  generic: "your own sender's configuration: it POSTs signed JSON to this URL",
  replicate: "the `webhook` field when you create a prediction",
  openai: "the project's Webhooks settings page (platform dashboard)",
  anthropic: "the workspace's webhook settings",
  fal: "the `fal_webhook` query parameter when you submit a request",
  runpod: "the `webhook` field of each `/run` request",
  cursor: "the `webhook.url` when you launch an agent (with the same secret as `webhook.secret`)",
  gemini: "the project's webhook (`webhooks.create`), whose signing secret you then paste in step 2",
};

export function Guide({ compact = false }: { compact?: boolean }) {
  const info = useStore(infoStore);
  const [provider, setProvider] = useState("generic");
  const [secrets, setSecrets] = useState<SecretsView | null>(null);
  const [sending, setSending] = useState(false);
  const [sent, setSent] = useState<TestDelivery | null>(null);
  const [arrived, setArrived] = useState<Job | null>(null);
  const [error, setError] = useState("");

  useEffect(() => {
    get<SecretsView>("/api/secrets").then(setSecrets).catch(() => {});
  }, []);

  // "See it arrive": the job of the test delivery shows up on the live stream.
  useEffect(() => {
    if (!sent) return;
    return onJob((job) => {
      if (job.provider === "generic" && job.job_id === sent.job_id) setArrived(job);
    });
  }, [sent]);

  if (!info) return null;
  const base = info.public_url ?? info.receiver_url;
  const intake = secrets?.providers[provider]?.webhooks ?? "signed";
  const url = webhookUrl(base, provider, intake);
  const genericSecret = secrets?.providers.generic?.webhook_secret.set ?? false;

  const test = async () => {
    setSending(true);
    setError("");
    setArrived(null);
    try {
      const answer = await send<TestDelivery>("POST", "/api/test-delivery");
      setSent(answer);
      if (answer.status !== 200) setError(`The receiver answered ${answer.status}: ${answer.answer.error ?? answer.answer.outcome ?? ""}`);
      // In case the stream delivered the job before we listened for it.
      get<Job>(`/api/jobs/generic/${encodeURIComponent(answer.job_id)}`)
        .then((j) => setArrived((a) => a ?? j))
        .catch(() => {});
    } catch (e) {
      setError(e instanceof ApiError ? e.message : errorText(e));
    } finally {
      setSending(false);
    }
  };

  return (
    <div class={`card guide ${compact ? "compact" : ""}`} data-testid="guide">
      {compact ? <h2>Get started in four steps</h2> : <h1 tabIndex={-1}>Get started in four steps</h1>}
      <ol class="steps">
        <li>
          <b>Pick a provider.</b>{" "}
          <select
            aria-label="Provider"
            value={provider}
            onChange={(e) => setProvider((e.target as HTMLSelectElement).value)}
            data-testid="guide-provider"
          >
            {info.providers.map((p) => (
              <option value={p}>{providerName(p)}</option>
            ))}
          </select>
        </li>
        <li>
          <b>Give NeverMiss its secret and key.</b> The webhook secret checks that deliveries are genuine; the API key lets NeverMiss poll
          for jobs whose webhook never comes.
          {secrets && (
            <div class="card inset">
              <ProviderSecretFields provider={provider} view={secrets} onSaved={setSecrets} />
            </div>
          )}
        </li>
        <li>
          {url === null ? (
            <p data-testid="webhook-url-none">
              <b>No webhook URL:</b> {providerName(provider)} sends no webhooks NeverMiss can take. Its jobs are polled with the API key: track
              one by its id (<code>nevermiss track {provider} ID</code>) and NeverMiss watches it to its end.
            </p>
          ) : (
            <>
              <b>Copy the webhook URL</b> into {WHERE[provider] ?? "the provider's webhook settings"}:
              <div class="url-box">
                <code data-testid="webhook-url">{url}</code>
                <CopyButton text={url} testId="copy-webhook-url" />
              </div>
              {intake === "url_token" && (
                <p class="muted small">
                  {providerName(provider)} signs nothing: the webhook secret of step 2 is the last part of this URL, and a delivery there only
                  makes NeverMiss poll the job at once.
                </p>
              )}
            </>
          )}
          {!info.public_url && (
            <p class="muted small">
              This address is on this machine only: a cloud provider cannot reach it until a tunnel runs (<a href="#/settings">Settings →
              Tunnel</a>, or <code>NEVERMISS_TUNNEL</code>). Local senders and the test below work now, and polling catches every job meanwhile.
            </p>
          )}
        </li>
        {provider === "generic" ? (
          <li>
            <b>Send a test delivery</b> and see it arrive: a signed <code>succeeded</code> webhook for a new job, sent to this receiver.
            <div class="input-row">
              <button type="button" class="btn primary" disabled={sending || !genericSecret} onClick={test} data-testid="send-test">
                {sending ? "Sending…" : "Send a test delivery"}
              </button>
              {!genericSecret && <span class="muted small">Needs a webhook secret for generic: generate one in step 2.</span>}
            </div>
            {error && <Notice level="error">{error}</Notice>}
            {sent && !arrived && !error && <p class="muted">Sent; waiting for it to arrive…</p>}
            {arrived && (
              <Notice level="ok" title="It arrived." testId="test-arrived">
                <StateBadge state={arrived.state} /> <code>{arrived.job_id}</code> by <SourceBadge source={arrived.terminal_source} />.{" "}
                <a href={jobHref(arrived.provider, arrived.job_id)}>Open it</a> to see the delivery and its raw request. A desktop
                notification goes out for it too.
              </Notice>
            )}
          </li>
        ) : (
          <li>
            <ProviderTest provider={provider} />
          </li>
        )}
      </ol>
    </div>
  );
}

/** Step 4 for a cloud: one of the user's own jobs, tracked and asked of the provider at once with
 * the key of step 2. The answer says what the provider said of it, or why it could not be asked
 * (no key, a refused key, an id the provider could not have). */
function ProviderTest({ provider }: { provider: string }) {
  const [jobId, setJobId] = useState("");
  const [busy, setBusy] = useState(false);
  const [answer, setAnswer] = useState<TrackAnswer | null>(null);
  const [error, setError] = useState("");
  // Another provider picked: its own test.
  useEffect(() => {
    setAnswer(null);
    setError("");
  }, [provider]);

  const submit = async (e: Event) => {
    e.preventDefault();
    if (!jobId.trim()) {
      setError(`Paste the id of one of your ${providerName(provider)} jobs.`);
      return;
    }
    setBusy(true);
    setError("");
    setAnswer(null);
    try {
      setAnswer(await send<TrackAnswer>("POST", "/api/jobs?first_poll=wait", { provider, job_id: jobId.trim() }));
    } catch (err) {
      setError(err instanceof ApiError ? err.message : errorText(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <b>Test it with one of your jobs:</b> NeverMiss tracks it and asks {providerName(provider)} for it now, with the key of step 2. A
      webhook from {providerName(provider)} then lands on the same job.
      <form class="input-row" onSubmit={submit} data-testid="provider-test">
        <input
          aria-label={`A ${providerName(provider)} job id`}
          value={jobId}
          onInput={(e) => setJobId((e.target as HTMLInputElement).value)}
          placeholder={placeholder(provider)}
          autocomplete="off"
          spellcheck={false}
          data-testid="provider-test-id"
        />
        <button type="submit" class="btn primary" disabled={busy} data-testid="provider-test-send">
          {busy ? `Asking ${providerName(provider)}…` : "Track and ask"}
        </button>
      </form>
      {error && (
        <Notice level="error" testId="provider-test-error">
          {error}
        </Notice>
      )}
      {answer && <ProviderTestAnswer provider={provider} answer={answer} />}
    </>
  );
}

function ProviderTestAnswer({ provider, answer }: { provider: string; answer: TrackAnswer }) {
  const name = providerName(provider);
  const problem = answer.poll_problem ?? answer.poll_error;
  if (problem) {
    return (
      <Notice level="warn" title={`${name} could not be asked.`} testId="provider-test-problem">
        {problem}
      </Notice>
    );
  }
  if (!answer.last_polled_at) {
    return (
      <p class="muted" data-testid="provider-test-waiting">
        Tracked; {name} has not answered yet. <a href={jobHref(answer.provider, answer.job_id)}>Open it</a> to see its first poll.
      </p>
    );
  }
  return (
    <Notice level="ok" title={`${name} answered.`} testId="provider-test-ok">
      <code>{answer.job_id}</code> is <StateBadge state={answer.state} />: the key works, and NeverMiss watches the job to its end.{" "}
      <a href={jobHref(answer.provider, answer.job_id)}>Open it</a>.
    </Notice>
  );
}
