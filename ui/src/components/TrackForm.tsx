// "Track a job": start watching a job by its id, so polling finds its end even if no webhook
// ever comes.

import { useEffect, useRef, useState } from "preact/hooks";

import { ApiError, errorText, send } from "../api";
import type { TrackAnswer } from "../generated/TrackAnswer";

export function TrackForm({ providers, onTracked }: { providers: string[]; onTracked: (answer: TrackAnswer, created: boolean) => void }) {
  const [provider, setProvider] = useState(providers.includes("generic") ? "generic" : (providers[0] ?? ""));
  const [jobId, setJobId] = useState("");
  const [label, setLabel] = useState("");
  const [statusUrl, setStatusUrl] = useState("");
  const [group, setGroup] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  // Shown when the user asks for it ("+ Track a job"): the focus goes to its first field.
  const firstField = useRef<HTMLSelectElement>(null);
  useEffect(() => firstField.current?.focus(), []);

  const submit = async (e: Event) => {
    e.preventDefault();
    if (!jobId.trim()) {
      setError("Enter the job's id, as the provider gave it.");
      return;
    }
    setBusy(true);
    setError("");
    try {
      const body: Record<string, string> = { provider, job_id: jobId.trim() };
      if (label.trim()) body.label = label.trim();
      if (group.trim()) body.group = group.trim();
      if (provider === "fal" && statusUrl.trim()) body.status_url = statusUrl.trim();
      const before = Date.now();
      // The answer waits for the job's first poll, which says whether the provider can be asked.
      const answer = await send<TrackAnswer>("POST", "/api/jobs?first_poll=wait", body);
      onTracked(answer, Date.parse(answer.created_at) >= before - 5_000);
      setJobId("");
      setLabel("");
      setGroup("");
      setStatusUrl("");
    } catch (err) {
      setError(err instanceof ApiError ? err.message : errorText(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="track-form" onSubmit={submit} data-testid="track-form">
      <label>
        Provider
        <select ref={firstField} value={provider} onChange={(e) => setProvider((e.target as HTMLSelectElement).value)} name="provider">
          {providers.map((p) => (
            <option value={p}>{p}</option>
          ))}
        </select>
      </label>
      <label class="grow">
        Job id
        <input
          name="job_id"
          value={jobId}
          onInput={(e) => setJobId((e.target as HTMLInputElement).value)}
          placeholder={placeholder(provider)}
          autocomplete="off"
          spellcheck={false}
        />
      </label>
      <label class="grow">
        Label <span class="muted">(optional)</span>
        <input name="label" value={label} onInput={(e) => setLabel((e.target as HTMLInputElement).value)} placeholder="nightly crawl" />
      </label>
      <label class="grow">
        Group <span class="muted">(optional: a sweep, announced once when all its jobs end)</span>
        <input name="group" value={group} onInput={(e) => setGroup((e.target as HTMLInputElement).value)} placeholder="sweep-7" autocomplete="off" spellcheck={false} />
      </label>
      {provider === "fal" && (
        <label class="grow wide">
          Status URL <span class="muted">(fal's status_url, from the submit answer)</span>
          <input
            name="status_url"
            value={statusUrl}
            onInput={(e) => setStatusUrl((e.target as HTMLInputElement).value)}
            placeholder="https://queue.fal.run/…/requests/…/status"
          />
        </label>
      )}
      <div class="actions">
        <button class="btn primary" type="submit" disabled={busy}>
          {busy ? "Tracking…" : "Track"}
        </button>
      </div>
      {error && (
        <p class="field-error wide" data-testid="track-error">
          {error}
        </p>
      )}
    </form>
  );
}

/** What a job id of the provider looks like, for an input's placeholder. */
export function placeholder(provider: string): string {
  switch (provider) {
    case "replicate":
      return "prediction id, e.g. gm3qorzdhgbfurvjtvhg6dckhu";
    case "openai":
      return "resp_… or batch_…";
    case "anthropic":
      return "msgbatch_…";
    case "fal":
      return "request id";
    case "gemini":
      return "batches/… or models/…/operations/…";
    case "runpod":
      return "endpoint id/job id";
    case "huggingface":
      return "namespace/job id";
    case "fireworks":
      return "accounts/…/batchInferenceJobs/…";
    case "cursor":
      return "bc-…";
    case "groq":
      return "batch_…";
    case "together":
      return "ft-… or a batch id";
    case "mistral":
      return "batch job id";
    default:
      return "job-42";
  }
}
