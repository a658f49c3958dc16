// Untrack on a job's view: one click asks, in the window, before anything is removed; once the
// owner confirms, the job, its timeline and its notifications are forgotten and the Jobs list is
// shown again. Escape, or "Keep watching", takes the question back.

import { useEffect, useRef, useState } from "preact/hooks";

import { errorText, jobPath, send } from "../api";
import { formatRoute } from "../route";
import { Notice } from "./common";
import { ConfirmQuestion } from "./ConfirmQuestion";

type Step = "offered" | "confirming" | "sending";

export function UntrackAction({ provider, jobId, label }: { provider: string; jobId: string; label: string }) {
  const [step, setStep] = useState<Step>("offered");
  const [error, setError] = useState("");
  const offerButton = useRef<HTMLButtonElement>(null);
  const keepButton = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (step === "confirming") keepButton.current?.focus();
  }, [step]);

  const confirmed = async () => {
    setStep("sending");
    try {
      await send("POST", `${jobPath(provider, jobId)}/untrack`);
      location.hash = formatRoute({ screen: "jobs", state: "", provider: "", q: "", group: "" });
    } catch (e) {
      setError(errorText(e));
      setStep("offered");
    }
  };

  if (step === "offered") {
    return (
      <>
        <button type="button" class="btn" ref={offerButton} onClick={() => setStep("confirming")} data-testid="untrack-job" title="Stop watching this job and forget it">
          Untrack
        </button>
        {error && (
          <Notice level="error" title="Not untracked" testId="untrack-error">
            {error}
          </Notice>
        )}
      </>
    );
  }
  return (
    <ConfirmQuestion
      name="untrack"
      title="Untrack this job?"
      question={`Stop watching ${provider} job “${label}” and forget its timeline? The provider is not asked to stop it.`}
      yes="Yes, untrack it"
      sendingText="Untracking…"
      keep="Keep watching"
      sending={step === "sending"}
      onYes={confirmed}
      onKeep={() => setStep("offered")}
      keepRef={keepButton}
    />
  );
}
