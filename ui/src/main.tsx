// Start-up: take the API token out of the address (`#token=...`), then show the app.

import "./styles.css";

import { render } from "preact";

import { setToken, storedToken } from "./api";
import { App } from "./components/App";
import { takeToken } from "./route";

const { token, hash } = takeToken(location.hash);
if (token) {
  setToken(token);
  // The token leaves the address bar and the history at once.
  history.replaceState(null, "", `${location.pathname}${location.search}${hash}`);
} else {
  setToken(storedToken());
  if (!location.hash) history.replaceState(null, "", `${location.pathname}${location.search}#/jobs`);
}

render(<App />, document.getElementById("app")!);
