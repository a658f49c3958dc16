// A question asked in the window before an action that cannot be taken back (cancel, untrack):
// the action's button and the safe answer's, Escape giving the safe answer. The caller moves the
// focus (to the safe answer when the question appears) through `keepRef`.

import type { ComponentChildren, Ref } from "preact";

export function ConfirmQuestion({
  name,
  title,
  question,
  yes,
  sendingText,
  keep,
  sending,
  onYes,
  onKeep,
  keepRef,
}: {
  /** The action's name in test ids (`cancel`: `cancel-confirm`, `cancel-yes`, `cancel-no`). */
  name: string;
  /** The question in a few words, for assistive technology ("Cancel this job?"). */
  title: string;
  question: ComponentChildren;
  yes: string;
  sendingText: string;
  keep: string;
  sending: boolean;
  onYes: () => void;
  onKeep: () => void;
  keepRef: Ref<HTMLButtonElement>;
}) {
  return (
    <div
      class="cancel-confirm"
      role="alertdialog"
      aria-label={title}
      aria-describedby={`${name}-question`}
      data-testid={`${name}-confirm`}
      onKeyDown={(e) => {
        if (e.key === "Escape" && !sending) {
          e.preventDefault();
          onKeep();
        }
      }}
    >
      <span id={`${name}-question`}>{question}</span>
      <button type="button" class="btn primary" onClick={onYes} disabled={sending} data-testid={`${name}-yes`}>
        {sending ? sendingText : yes}
      </button>
      <button type="button" class="btn" ref={keepRef} onClick={onKeep} disabled={sending} data-testid={`${name}-no`}>
        {keep}
      </button>
    </div>
  );
}
