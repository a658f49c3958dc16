// Cancel on a running job's view: one click asks, in the window, before anything is sent; the
// provider's answer (or its refusal, as it answered) is shown where the question was. Opened from
// a notification's "Cancel" button (`ask`), the question is asked at once.

import { useEffect, useState } from "preact/hooks";

import { jobPath, send } from "../api";
import { accepted, cancellable, type CancelStep, confirmQuestion, OFFERED, refused } from "../cancel";
import type { CancelAnswer } from "../generated/CancelAnswer";
import type { JobState } from "../generated/JobState";
import { Notice } from "./common";

export function CancelAction({ provider, jobId, label, state, ask = false }: { provider: string; jobId: string; label: string; state: JobState; ask?: boolean }) {
  const first: CancelStep = ask ? { step: "confirming" } : OFFERED;
  const [step, setStep] = useState<CancelStep>(first);
  useEffect(() => setStep(first), [provider, jobId, ask]);

  const confirmed = async () => {
    setStep({ step: "sending" });
    try {
      setStep(accepted(await send<CancelAnswer>("POST", `${jobPath(provider, jobId)}/cancel`), provider));
    } catch (e) {
      setStep(refused(e, provider));
    }
  };

  if (step.step === "answered") {
    return (
      <Notice level={step.ok ? "ok" : "warn"} title={step.ok ? "Cancel requested" : "Not canceled"} testId="cancel-answer">
        {step.text}
      </Notice>
    );
  }
  if (!cancellable(state)) return null;
  if (step.step === "offered") {
    return (
      <button type="button" class="btn" onClick={() => setStep({ step: "confirming" })} data-testid="cancel-job" title="Ask the provider to cancel this job">
        ✕ Cancel job
      </button>
    );
  }
  return (
    <div class="cancel-confirm" role="alertdialog" aria-label="Cancel this job?" data-testid="cancel-confirm">
      <span>{confirmQuestion(provider, label)}</span>
      <button type="button" class="btn primary" onClick={confirmed} disabled={step.step === "sending"} data-testid="cancel-yes">
        {step.step === "sending" ? "Asking…" : "Yes, cancel it"}
      </button>
      <button type="button" class="btn" onClick={() => setStep(OFFERED)} disabled={step.step === "sending"} data-testid="cancel-no">
        Keep it running
      </button>
    </div>
  );
}
