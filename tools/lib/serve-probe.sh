# Starting an installed `nevermiss serve` and asking it what a user's first minute would: sourced
# by the package checks (tools/deb-check, tools/dist-check), each of which installs its artifact
# its own way and then hands the command it would run here.
#
#   probe_free_port                 a free loopback port
#   probe_start LOG COMMAND...      starts COMMAND in the background (stdout and stderr to LOG);
#                                   PROBE_PID is its pid
#   probe_health TOKEN_FILE API     waits (PROBE_TIMEOUT seconds, default 30) until the API token
#                                   file exists and API/health answers with it; checks the answer
#                                   says ok and, when PROBE_VERSION is set, that version; prints it
#   probe_delivery RECEIVER API TOKEN_FILE SECRET ID
#                                   sends one generic webhook signed with SECRET to RECEIVER (its
#                                   base URL): answered applied, and the job ID it made is listed
#                                   by the API as succeeded
#   probe_stop [SIGNAL]             sends SIGNAL (default TERM) and waits (PROBE_TIMEOUT) for a
#                                   clean exit, status 0
#
# A failure calls the caller's `fail MESSAGE` (which exits), after printing the log.

PROBE_PID=""
PROBE_LOG=""

probe_fail() {
  [ -n "$PROBE_LOG" ] && [ -f "$PROBE_LOG" ] && sed 's/^/    serve: /' "$PROBE_LOG" | tail -n 40 >&2
  fail "$*"
}

probe_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

probe_start() {
  PROBE_LOG=$1
  shift
  "$@" >"$PROBE_LOG" 2>&1 &
  PROBE_PID=$!
}

probe_health() {
  local token_file=$1 api=$2 health="" tries
  tries=$(( ${PROBE_TIMEOUT:-30} * 10 ))
  for _ in $(seq 1 "$tries"); do
    kill -0 "$PROBE_PID" 2>/dev/null || probe_fail "serve ended before answering /api/health"
    if [ -s "$token_file" ]; then
      health=$(curl -fsS -H "Authorization: Bearer $(cat "$token_file")" "$api/health" 2>/dev/null || true)
      [ -n "$health" ] && break
    fi
    sleep 0.1
  done
  [ -n "$health" ] || probe_fail "serve did not answer $api/health within ${PROBE_TIMEOUT:-30} s"
  grep -q '"ok":true' <<<"$health" || probe_fail "$api/health answered $health"
  if [ -n "${PROBE_VERSION:-}" ]; then
    grep -q "\"version\":\"$PROBE_VERSION\"" <<<"$health" || probe_fail "$api/health answered $health, not version $PROBE_VERSION"
  fi
  echo "$health"
}

probe_delivery() {
  local receiver=$1 api=$2 token_file=$3 secret=$4 id=$5 body signature answer job
  body="{\"deliveryId\":\"$id-1\",\"jobId\":\"$id\",\"state\":\"succeeded\",\"seq\":1,\"label\":\"from the package\"}"
  signature=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$secret" -r | cut -d' ' -f1)
  answer=$(curl -fsS -H 'Content-Type: application/json' -H "X-Agent-Signature: sha256=$signature" \
    --data-binary "$body" "$receiver/hooks/generic" 2>&1) || probe_fail "the signed delivery failed: $answer"
  [ "$answer" = '{"outcome":"applied"}' ] || probe_fail "the signed delivery was answered $answer"
  job=$(curl -fsS -H "Authorization: Bearer $(cat "$token_file")" "$api/jobs/generic/$id" 2>&1) || probe_fail "the job $id: $job"
  grep -q '"state":"succeeded"' <<<"$job" || probe_fail "the job it made reads $job"
}

probe_stop() {
  local signal=${1:-TERM} status=0 tries
  tries=$(( ${PROBE_TIMEOUT:-30} * 10 ))
  kill -"$signal" "$PROBE_PID" 2>/dev/null || probe_fail "serve was gone before SIG$signal"
  for _ in $(seq 1 "$tries"); do
    kill -0 "$PROBE_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$PROBE_PID" 2>/dev/null; then
    kill -KILL "$PROBE_PID" 2>/dev/null
    probe_fail "serve did not stop within ${PROBE_TIMEOUT:-30} s of SIG$signal"
  fi
  wait "$PROBE_PID" || status=$?
  PROBE_PID=""
  [ "$status" = 0 ] || probe_fail "serve exited $status on SIG$signal"
}

# For the callers' EXIT traps: a serve still running is killed.
probe_cleanup() {
  if [ -n "$PROBE_PID" ]; then
    kill -KILL "$PROBE_PID" 2>/dev/null || true
    wait "$PROBE_PID" 2>/dev/null || true
    PROBE_PID=""
  fi
}
