# shellcheck shell=bash
#
# Supervision, shared by deploy/up and deploy/host-up. Each component runs under a
# supervisor subshell of its own that restarts it when it exits, so one crash never
# takes the others down: above all, a control that dies must not end the terminals the
# gateway and the ttyd pools carry (design §1: control is never on the byte path). Only
# Ctrl-C or SIGTERM to the script stops everything, and then exactly what it started.
#
# The caller sets UP_FLAG (a file that exists once the whole stack is up: until then a
# component that exits is a setup problem, reported, not restarted), and installs the
# traps: trap 'stop; exit 0' INT TERM; trap stop EXIT.
# Probes, hooks and the stop handler are called indirectly (by the supervisors and by
# traps), which shellcheck takes for unreachable code.
# shellcheck disable=SC2317

# Restart delay: 0.5 s, doubling per quick exit up to 10 s; a run of 60 s or more
# counts as healthy and starts the sequence over.
BACKOFF_MIN_MS=500
BACKOFF_MAX_MS=10000
HEALTHY_MS=60000
now_ms() { local t=${EPOCHREALTIME/[.,]/}; printf '%s' "$((t / 1000))"; }
secs() { printf '%d.%d' "$(($1 / 1000))" "$((($1 % 1000) / 100))"; }
# "status 137 (SIGKILL)" for a death by signal, "status 3" otherwise.
describe_status() {
    local s=$1 sig
    if ((s > 128)) && sig="$(kill -l "$((s - 128))" 2>/dev/null)"; then
        printf 'status %s (SIG%s)' "$s" "${sig#SIG}"
    else
        printf 'status %s' "$s"
    fi
}
# One line on deploy/up's stderr (fd 3 in a supervisor) and in the component's log.
report() {
    local log=$1
    shift
    printf '==> %s\n' "$*" >&3
    printf '%s termgate-up: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$*" >>"$log"
}

# Each terminal's `ttyd-attach` → `docker attach` runs in a session of its own
# (ttyd forks it on a pty), so it survives a ttyd that is killed, and an attach
# stream left open can fill the container's output buffer and freeze its program.
# They all carry their pool's marker in their environment: end them by it.
sweep_marker() {
    local marker=$1 f p
    local -a files pids=()
    mapfile -t files < <(grep -lzxF -- "TERMGATE_POOL_RUN=$marker" /proc/[0-9]*/environ 2>/dev/null)
    for f in "${files[@]}"; do
        p=${f#/proc/}
        p=${p%/environ}
        [[ "$p" != "$BASHPID" ]] && pids+=("$p")
    done
    if ((${#pids[@]})); then
        kill -KILL "${pids[@]}" 2>/dev/null
        printf '%s' "${#pids[@]}"
    else
        printf 0
    fi
}

# supervise NAME LOG READY ARG MARKER CMD...: runs CMD (output appended to LOG)
# and restarts it whenever it exits, after the backoff delay. READY ARG is the
# probe that says it serves again; MARKER (or -) names the processes a ttyd pool
# leaves behind, swept after each exit. TERM or INT stops CMD and then returns.
supervise() {
    local name=$1 log=$2 ready=$3 ready_arg=$4 marker=$5
    shift 5
    # This subshell decides by exit statuses itself: errexit and the ERR trap
    # (inherited through errtrace) would end it at the first one.
    set +e +o pipefail
    trap - ERR
    # Reports go to deploy/up's stderr through fd 3; the subshell's own stderr,
    # where bash notes "Killed" for a child that died by a signal (the report says
    # it already), goes to the component's log.
    exec 3>&2 2>>"$log"
    local child="" stopping="" status delay_ms=$BACKOFF_MIN_MS started_ms exited_ms="" ran_ms n
    # A signal only records the stop and passes it on; the loops below see it once
    # `wait` returns. A second signal does not wait for a drain any more.
    trap 'if [[ -z "$stopping" ]]; then stopping=1; [[ -n "$child" ]] && kill -TERM "$child"; elif [[ -n "$child" ]]; then kill -KILL "$child"; fi 2>/dev/null' TERM INT
    # wait_child: waits until $child has really exited and sets $status. A trapped
    # signal also ends `wait` (with 128+n), but the child is then still there:
    # only a child that is gone ends the loop, so an interrupted wait is never
    # taken for an exit (and its status is the child's own: bash keeps it).
    wait_child() {
        while :; do
            # (bash's own "Killed" notice would only repeat the report below)
            wait "$child" 2>/dev/null
            status=$?
            kill -0 "$child" 2>/dev/null || break
        done
    }
    while [[ -z "$stopping" ]]; do
        "$@" >>"$log" 2>&1 &
        child=$!
        # A signal between the fork and the line above found no child to pass on to.
        [[ -n "$stopping" ]] && kill -TERM "$child" 2>/dev/null
        started_ms=$(now_ms)
        # Probe (for at most 60 s) until it serves, so the log says when it is back.
        local until_ms=$((started_ms + 60000)) ok=""
        while [[ -z "$stopping" ]] && kill -0 "$child" 2>/dev/null && (($(now_ms) < until_ms)); do
            if "$ready" "$ready_arg"; then ok=1; break; fi
            sleep 0.1
        done
        if [[ -n "$ok" && -n "$exited_ms" ]]; then
            report "$log" "$name is back (pid $child), $(secs "$(($(now_ms) - exited_ms))") s after it exited"
        fi
        wait_child
        child=""
        exited_ms=$(now_ms)
        ran_ms=$((exited_ms - started_ms))
        if [[ "$marker" != - ]]; then
            n=$(sweep_marker "$marker")
            ((n > 0)) && report "$log" "$name: ended $n attach process(es) its ttyd left behind"
        fi
        [[ -n "$stopping" ]] && break
        # Still starting up: deploy/up reports the failure and stops the rest.
        [[ -e "$UP_FLAG" ]] || exit "$status"
        # deploy/up itself is gone (killed with SIGKILL): start nothing it cannot stop.
        kill -0 $$ 2>/dev/null || break
        ((ran_ms >= HEALTHY_MS)) && delay_ms=$BACKOFF_MIN_MS
        report "$log" "$name exited with $(describe_status "$status") after $(secs "$ran_ms") s; restarting in $(secs "$delay_ms") s"
        # The delay as a child too, so that a signal ends it at once.
        sleep "$(secs "$delay_ms")" &
        child=$!
        wait_child
        child=""
        delay_ms=$((delay_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay_ms * 2))
    done
    exit 0
}

sv_pids=()
sv_names=()
stop() {
    # A second signal while stopping is passed on: the supervisors then kill
    # their components at once instead of waiting for the gateway's drain.
    trap 'kill -TERM "${sv_pids[@]}" 2>/dev/null' INT TERM
    trap - EXIT
    rm -f "$UP_FLAG"
    if ((${#sv_pids[@]})); then
        printf '\n==> stopping termgate\n' >&2
        kill -TERM "${sv_pids[@]}" 2>/dev/null || true
        # Each supervisor returns once its component has exited (the gateway may
        # drain open terminals for gateway.drain_seconds first). A signal ends
        # `wait` early, so wait until each one is really gone.
        local p
        for p in "${sv_pids[@]}"; do
            while kill -0 "$p" 2>/dev/null; do wait "$p" 2>/dev/null || true; done
        done
    fi
}
# start NAME LOG READY ARG MARKER CMD...: CMD under its supervisor.
start() {
    supervise "$@" &
    sv_pids+=($!)
    sv_names+=("$1")
}
# Whether the supervisor started last still runs (during startup it ends with
# its component).
last_alive() { kill -0 "${sv_pids[-1]}" 2>/dev/null; }

