// The list of keyboard shortcuts, opened by `?` or the "?" button: a modal dialog that takes the
// focus, keeps Tab inside itself, closes on Escape (or its button, or a click beside it) and gives
// the focus back to whatever had it before.

import { useEffect, useRef } from "preact/hooks";

import { SHORTCUTS } from "../shortcuts";

export function ShortcutsDialog({ onClose }: { onClose: () => void }) {
  const close = useRef<HTMLButtonElement>(null);

  useEffect(() => {
    const opener = document.activeElement as HTMLElement | null;
    close.current?.focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape") {
        e.preventDefault();
        onClose();
      } else if (e.key === "Tab") {
        // The one control inside is the Close button: Tab stays on it rather than leave the dialog.
        e.preventDefault();
        close.current?.focus();
      }
    };
    document.addEventListener("keydown", onKey, true);
    return () => {
      document.removeEventListener("keydown", onKey, true);
      // Back where the user was, if that is still on the page; else the screen's heading.
      if (opener && opener.isConnected && opener !== document.body) opener.focus();
      else document.querySelector<HTMLElement>("main h1")?.focus();
    };
  }, []);

  return (
    <div class="dialog-backdrop" onClick={(e) => e.target === e.currentTarget && onClose()}>
      <div class="dialog" role="dialog" aria-modal="true" aria-labelledby="shortcuts-title" data-testid="shortcuts">
        <h2 id="shortcuts-title">Keyboard shortcuts</h2>
        <table class="shortcuts">
          <tbody>
            {SHORTCUTS.map((s) => (
              <tr key={s.keys.join(" ")}>
                <th scope="row">
                  {s.keys.map((k, i) => (
                    <>
                      {i > 0 && <span class="muted"> then </span>}
                      <kbd>{k}</kbd>
                    </>
                  ))}
                </th>
                <td>{s.what}</td>
              </tr>
            ))}
          </tbody>
        </table>
        <div class="dialog-actions">
          <button type="button" class="btn" ref={close} onClick={onClose} data-testid="shortcuts-close">
            Close
          </button>
        </div>
      </div>
    </div>
  );
}
