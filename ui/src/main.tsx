// Start-up: take the API token out of the address (`#token=...`), then show the app.

// First, before any module that formats numbers or dates is evaluated (see locale.ts).
import "./locale";
import "./styles.css";

import { render } from "preact";

import { adoptTokenFromAddress, setToken, storedToken } from "./api";
import { App } from "./components/App";
import { takeToken } from "./route";

// The token leaves the address bar and the history at once.
if (!adoptTokenFromAddress(takeToken)) {
  setToken(storedToken());
  if (!location.hash) history.replaceState(null, "", `${location.pathname}${location.search}#/jobs`);
}

render(<App />, document.getElementById("app")!);
