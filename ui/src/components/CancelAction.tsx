// Cancel on a running job's view: one click asks, in the window, before anything is sent; the
// provider's answer (or its refusal, as it answered) is shown where the question was. Opened from
// a notification's "Cancel" button (`ask`), the question is asked at once. From the keyboard: the
// question takes the focus on its safe answer ("Keep it running"), Escape gives that answer, and
// the focus follows to what replaces the question (the Cancel button again, or the answer).

import { useEffect, useRef, useState } from "preact/hooks";

import { jobPath, send } from "../api";
import { accepted, cancellable, type CancelStep, confirmQuestion, OFFERED, refused } from "../cancel";
import type { CancelAnswer } from "../generated/CancelAnswer";
import type { JobState } from "../generated/JobState";
import { Notice } from "./common";
import { ConfirmQuestion } from "./ConfirmQuestion";

export function CancelAction({ provider, jobId, label, state, ask = false }: { provider: string; jobId: string; label: string; state: JobState; ask?: boolean }) {
  // Its step starts over for another job or another `ask` by a new instance (the caller keys it
  // by them), not by an effect: an effect run after the first paint would undo a step a quick
  // user (or keyboard) took before it ran.
  const [step, setStep] = useState<CancelStep>(ask ? { step: "confirming" } : OFFERED);

  // Where the focus goes once the step the user's last key or click led to is shown.
  const focusNext = useRef<"keep" | "cancel" | "answer" | null>(null);
  const cancelButton = useRef<HTMLButtonElement>(null);
  const keepButton = useRef<HTMLButtonElement>(null);
  const answerBox = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const where = focusNext.current;
    if (!where) return;
    const target = { keep: keepButton, cancel: cancelButton, answer: answerBox }[where].current;
    if (target) {
      target.focus();
      focusNext.current = null;
    }
  }, [step]);
  const go = (next: CancelStep, focus: "keep" | "cancel" | "answer") => {
    focusNext.current = focus;
    setStep(next);
  };

  const confirmed = async () => {
    setStep({ step: "sending" });
    try {
      go(accepted(await send<CancelAnswer>("POST", `${jobPath(provider, jobId)}/cancel`), provider), "answer");
    } catch (e) {
      go(refused(e, provider), "answer");
    }
  };

  if (step.step === "answered") {
    return (
      <div tabIndex={-1} ref={answerBox} class="cancel-answer">
        <Notice level={step.ok ? "ok" : "warn"} title={step.ok ? "Cancel requested" : "Not canceled"} testId="cancel-answer">
          {step.text}
        </Notice>
      </div>
    );
  }
  if (!cancellable(state)) return null;
  if (step.step === "offered") {
    return (
      <button type="button" class="btn" ref={cancelButton} onClick={() => go({ step: "confirming" }, "keep")} data-testid="cancel-job" title="Ask the provider to cancel this job">
        ✕ Cancel job
      </button>
    );
  }
  return (
    <ConfirmQuestion
      name="cancel"
      title="Cancel this job?"
      question={confirmQuestion(provider, label)}
      yes="Yes, cancel it"
      sendingText="Asking…"
      keep="Keep it running"
      sending={step.step === "sending"}
      onYes={confirmed}
      onKeep={() => go(OFFERED, "cancel")}
      keepRef={keepButton}
    />
  );
}
