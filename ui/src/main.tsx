// Start-up: take the API token (`#token=...`) or a one-time code for it (`#code=...`, from
// `nevermiss open`) out of the address, then show the app.

// First, before any module that formats numbers or dates is evaluated (see locale.ts).
import "./locale";
import "./styles.css";

import { render } from "preact";

import { adoptCodeFromAddress, adoptTokenFromAddress, setToken, storedToken } from "./api";
import { App } from "./components/App";
import { takeCode, takeToken } from "./route";
import { startTheme } from "./theme";

// Light or dark before the first paint, so a dark desktop never flashes a white page.
startTheme();

// The token leaves the address bar and the history at once.
if (!adoptTokenFromAddress(takeToken)) {
  // A code is redeemed in the background: the stored token (if any) serves until it answers.
  setToken(storedToken());
  if (!adoptCodeFromAddress(takeCode) && !location.hash) history.replaceState(null, "", `${location.pathname}${location.search}#/jobs`);
}
// A `#token=...` (or `#code=...`) address opened in this tab later (a notification's click, `nevermiss open`, a
// pasted link) is a same-document navigation: the token is taken here, by the first listener,
// registered before anything renders, so no listener ever sees it and no click lands before a
// listener exists. The router's own listener then reads the clean fragment.
window.addEventListener("hashchange", () => adoptTokenFromAddress(takeToken) || adoptCodeFromAddress(takeCode));

render(<App />, document.getElementById("app")!);
