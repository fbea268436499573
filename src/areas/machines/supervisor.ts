// The supervisor: a small bash program that runs as a machine's background process inside its box. It
// starts the app, restarts it when it dies (doubling the wait on a crash loop, up to 30 s, and saying
// so in the log), stamps and appends the app's output to /var/log/nube/app.log, and rotates that log
// by size. It holds the secrets only in its environment (the driver passes them to the process, never
// to a file). SIGTERM (restart, delete) stops the app's whole session, then the supervisor.
// It keeps one line of state in /opt/nube/app.state (its run token from nube, up / exited / stopped,
// how many times it started the app, the last exit code and when), which nube reads to say what the
// app is doing (app-health.ts).

export const APP_DIR = '/app';
export const LOG_FILE = '/var/log/nube/app.log';
export const SUPERVISOR_PATH = '/opt/nube/supervisor.sh';
export const STATE_FILE = '/opt/nube/app.state';
/** The log rotates past this size (one previous file is kept, `app.log.1`). */
export const LOG_MAX_BYTES = 5 * 1024 * 1024;

export const SUPERVISOR_SCRIPT = `#!/bin/bash
unset NUBE_SUPERVISOR
LOG=${LOG_FILE}
MAX=\${NUBE_LOG_MAX_BYTES:-${LOG_MAX_BYTES}}
mkdir -p "$(dirname "$LOG")"
child=0
RUN=\${NUBE_RUN:-}
unset NUBE_RUN
STATE=${STATE_FILE}
starts=0 started=- code=- exited=-
note() {
  printf 'run=%s state=%s starts=%s started=%s code=%s exited=%s next=%s\\n' "$RUN" "$1" "$starts" "$started" "$code" "$exited" "\${2:--}" > "$STATE.tmp" && mv -f "$STATE.tmp" "$STATE"
}
stop() {
  if [ "$child" -gt 0 ]; then
    kill -TERM -- "-$child" 2>/dev/null
    for _ in $(seq 1 30); do kill -0 -- "-$child" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$child" 2>/dev/null
  fi
  rm -f /opt/nube/app.pgid
  note stopped
  printf '%(%Y-%m-%dT%H:%M:%SZ)T [nube] supervisor stopped\\n' -1 >> "$LOG"
  exit 0
}
trap stop TERM INT
say() { printf '%(%Y-%m-%dT%H:%M:%SZ)T [nube] %s\\n' -1 "$1" >> "$LOG"; }
stamp() {
  local line size
  size=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
  while IFS= read -r line; do
    printf '%(%Y-%m-%dT%H:%M:%SZ)T %s\\n' -1 "$line" >> "$LOG"
    size=$((size + \${#line} + 22))
    if [ "$size" -gt "$MAX" ]; then mv -f "$LOG" "$LOG.1"; size=0; fi
  done
}
backoff=1
cd ${APP_DIR} || { say "no ${APP_DIR} directory"; exit 1; }
while true; do
  began=$SECONDS
  starts=$((starts + 1))
  printf -v started '%(%s)T' -1
  say "starting: $NUBE_START"
  setsid bash -c "$NUBE_START" > >(stamp) 2>&1 < /dev/null &
  child=$!
  echo "$child" > /opt/nube/app.pgid
  note up
  wait "$child"
  rc=$?
  child=0
  rm -f /opt/nube/app.pgid
  code=$rc
  printf -v exited '%(%s)T' -1
  if [ $((SECONDS - began)) -ge 30 ]; then backoff=1; fi
  note exited "$backoff"
  how="code $rc"
  if [ "$rc" -gt 128 ]; then how="code $rc (killed by signal $((rc - 128)))"; fi
  if [ "$backoff" -gt 1 ]; then
    say "app exited with $how; crash loop: restarting in \${backoff}s"
  else
    say "app exited with $how; restarting in \${backoff}s"
  fi
  sleep "$backoff" & wait $!
  backoff=$((backoff * 2))
  if [ "$backoff" -gt 30 ]; then backoff=30; fi
done
`;
