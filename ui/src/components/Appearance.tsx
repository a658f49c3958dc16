// Settings, "Appearance": light, dark, or as the OS is. This browser's own choice, applied at
// once and kept in its localStorage (theme.ts says why not in the engine).

import { useStore } from "../store";
import { chooseTheme, parseChoice, THEME_CHOICES, themeChoice } from "../theme";

export function Appearance() {
  const choice = useStore(themeChoice);
  return (
    <div class="card" data-testid="appearance">
      <h2>Appearance</h2>
      <div class="fields">
        <div class="field" data-field="theme">
          <label for="f-theme">Theme</label>
          <select id="f-theme" value={choice} onChange={(e) => chooseTheme(parseChoice((e.target as HTMLSelectElement).value))}>
            {THEME_CHOICES.map((c) => (
              <option value={c.value}>{c.label}</option>
            ))}
          </select>
          <p class="hint">For this window or browser only, applied at once. As the system: dark when the OS is in dark mode.</p>
        </div>
      </div>
    </div>
  );
}
