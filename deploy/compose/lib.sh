# shellcheck shell=bash
#
# Shared by deploy/compose-build, deploy/compose-up and deploy/compose-down.
# Source it after deploy/lib/prereqs.sh (it needs TERMGATE_ROOT, die, info);
# it only defines variables and functions.
#
# Settings, all from the environment (see deploy/compose/README.md):
#   TERMGATE_COMPOSE_PROJECT  compose project name                  (termgate)
#   TERMGATE_PORT             gateway port on 127.0.0.1             (8080)
#   TERMGATE_INSTANCE         instance id, label of session containers (compose)
#   TERMGATE_COMPOSE_STATE    where generated secrets live          (deploy/compose/.state)
#   TERMGATE_INTERNAL_SUBNET  IPv4 subnet of the internal network   (reused, else a free /24)
#   DOCKER_SOCKET             daemon socket, dockgate's only        (/var/run/docker.sock)
#   DOCKER_GID                group owning that socket              (stat of the socket)
#   TERMGATE_COMPOSE          compose command                       (docker-compose, else docker compose)

# TERMGATE_ROOT comes from deploy/lib/prereqs.sh.
# shellcheck disable=SC2153
COMPOSE_DIR="$TERMGATE_ROOT/deploy/compose"
COMPOSE_FILE="$TERMGATE_ROOT/deploy/compose.yaml"

# uid/gid the gateway, control and ttyd processes run as inside their images
# (dockgate runs as 10002, see compose.yaml).
# shellcheck disable=SC2034 # used by the scripts that source this file
TERMGATE_UID=10001

# Path of the configuration inside the gateway and control containers.
# shellcheck disable=SC2034 # used by the scripts that source this file
COMPOSE_CONFIG_IN_CONTAINER=/etc/termgate/termgate.toml

# Fill in and export every variable compose.yaml interpolates, so that all three
# scripts (and therefore `up` and `down`) see the same project.
compose_settings() {
    TERMGATE_COMPOSE_PROJECT="${TERMGATE_COMPOSE_PROJECT:-termgate}"
    [[ "$TERMGATE_COMPOSE_PROJECT" =~ ^[a-z0-9][a-z0-9_-]*$ ]] \
        || die "TERMGATE_COMPOSE_PROJECT=$TERMGATE_COMPOSE_PROJECT: use lower-case letters, digits, - and _"

    TERMGATE_PORT="${TERMGATE_PORT:-8080}"
    if ! [[ "$TERMGATE_PORT" =~ ^[0-9]+$ ]] || ((TERMGATE_PORT < 1 || TERMGATE_PORT > 65535)); then
        die "TERMGATE_PORT=$TERMGATE_PORT is not a TCP port"
    fi

    # Same rule as the configuration's `instance` key.
    TERMGATE_INSTANCE="${TERMGATE_INSTANCE:-compose}"
    [[ "$TERMGATE_INSTANCE" =~ ^[a-z0-9-]{1,32}$ ]] \
        || die "TERMGATE_INSTANCE=$TERMGATE_INSTANCE: 1-32 characters of a-z, 0-9 and -"

    TERMGATE_COMPOSE_STATE="${TERMGATE_COMPOSE_STATE:-$COMPOSE_DIR/.state}"
    # compose resolves relative paths against deploy/, the caller meant its own directory.
    [[ "$TERMGATE_COMPOSE_STATE" == /* ]] || TERMGATE_COMPOSE_STATE="$PWD/$TERMGATE_COMPOSE_STATE"

    DOCKER_SOCKET="${DOCKER_SOCKET:-/var/run/docker.sock}"
    if [[ -z "${DOCKER_GID:-}" ]]; then
        DOCKER_GID="$(stat -c %g "$DOCKER_SOCKET" 2>/dev/null)" \
            || die "cannot stat $DOCKER_SOCKET; set DOCKER_SOCKET or DOCKER_GID"
    fi
    [[ "$DOCKER_GID" =~ ^[0-9]+$ ]] || die "DOCKER_GID=$DOCKER_GID is not a numeric group id"

    export TERMGATE_COMPOSE_PROJECT TERMGATE_PORT TERMGATE_INSTANCE TERMGATE_COMPOSE_STATE \
        DOCKER_SOCKET DOCKER_GID

    if [[ -n "${TERMGATE_COMPOSE:-}" ]]; then
        # Word-split on purpose: TERMGATE_COMPOSE="docker compose".
        read -r -a COMPOSE_CMD <<<"$TERMGATE_COMPOSE"
    elif command -v docker-compose >/dev/null 2>&1; then
        COMPOSE_CMD=(docker-compose)
    elif docker compose version >/dev/null 2>&1; then
        COMPOSE_CMD=(docker compose)
    else
        die "neither docker-compose nor the docker compose plugin is installed"
    fi
}

# compose ARGS...: the compose command for this project and file.
compose() {
    "${COMPOSE_CMD[@]}" -p "$TERMGATE_COMPOSE_PROJECT" -f "$COMPOSE_FILE" "$@"
}

# Name compose gives the `internal` network of this project (v1 and v2 alike).
compose_internal_network() {
    printf '%s_internal\n' "$TERMGATE_COMPOSE_PROJECT"
}

# --------------------------------------------------------------------------
# Internal subnet and the pinned ttyd address
# --------------------------------------------------------------------------
#
# gateway.ttyd_upstreams only accepts addresses (the configuration refuses host
# names there), so ttyd gets a fixed address on the internal network and the
# network a fixed subnet. The subnet has to be free on this Docker daemon; the
# scripts reuse the one of an existing network of the project, else pick a /24
# no other Docker network overlaps.

_cmp_ip_to_int() {
    local IFS=. a b c d
    read -r a b c d <<<"$1"
    printf '%s\n' "$(((a << 24) | (b << 16) | (c << 8) | d))"
}

_cmp_int_to_ip() {
    local n=$1
    printf '%s.%s.%s.%s\n' $(((n >> 24) & 255)) $(((n >> 16) & 255)) $(((n >> 8) & 255)) $((n & 255))
}

# _cmp_range CIDR: prints "first last" as integers; fails on anything but IPv4.
_cmp_range() {
    local cidr=$1 ip bits first size
    [[ "$cidr" =~ ^([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})/([0-9]{1,2})$ ]] || return 1
    ip="${BASH_REMATCH[1]}" bits="${BASH_REMATCH[2]}"
    ((bits <= 32)) || return 1
    size=$((1 << (32 - bits)))
    first=$(($(_cmp_ip_to_int "$ip") & ~(size - 1) & 0xffffffff))
    printf '%s %s\n' "$first" "$((first + size - 1))"
}

# IPv4 subnets of every Docker network, one a line.
_cmp_used_subnets() {
    local ids
    ids="$(docker network ls -q)" || return 1
    [[ -n "$ids" ]] || return 0
    # shellcheck disable=SC2086
    docker network inspect --format '{{range .IPAM.Config}}{{.Subnet}}{{"\n"}}{{end}}' $ids
}

# Sets and exports TERMGATE_INTERNAL_SUBNET, TERMGATE_TTYD_ADDRESS (the last
# usable address of the subnet) and TERMGATE_TTYD_VIEW_ADDRESS (the one before: the
# read-only pool of share links).
compose_internal_subnet() {
    local existing
    existing="$(docker network inspect --format '{{range .IPAM.Config}}{{.Subnet}} {{end}}' \
        "$(compose_internal_network)" 2>/dev/null)" || existing=""
    existing="${existing%% *}"

    if [[ -n "${TERMGATE_INTERNAL_SUBNET:-}" ]]; then
        if [[ -n "$existing" && "$existing" != "$TERMGATE_INTERNAL_SUBNET" ]]; then
            die "network $(compose_internal_network) exists with subnet $existing, not $TERMGATE_INTERNAL_SUBNET; run deploy/compose-down first"
        fi
    elif [[ -n "$existing" ]]; then
        TERMGATE_INTERNAL_SUBNET="$existing"
    else
        TERMGATE_INTERNAL_SUBNET="$(_cmp_pick_subnet)" || die "no free /24 for the internal network; set TERMGATE_INTERNAL_SUBNET"
    fi

    local range first last
    range="$(_cmp_range "$TERMGATE_INTERNAL_SUBNET")" \
        || die "TERMGATE_INTERNAL_SUBNET=$TERMGATE_INTERNAL_SUBNET is not an IPv4 CIDR such as 10.250.7.0/24"
    read -r first last <<<"$range"
    ((last - first >= 7)) || die "TERMGATE_INTERNAL_SUBNET=$TERMGATE_INTERNAL_SUBNET is too small (at most /29)"
    TERMGATE_TTYD_ADDRESS="$(_cmp_int_to_ip $((last - 1)))"
    TERMGATE_TTYD_VIEW_ADDRESS="$(_cmp_int_to_ip $((last - 2)))"
    export TERMGATE_INTERNAL_SUBNET TERMGATE_TTYD_ADDRESS TERMGATE_TTYD_VIEW_ADDRESS
}

# A /24 in 10.250.0.0/16 that overlaps no Docker network. The scan starts at an
# offset derived from the project name so that projects brought up at the same
# time rarely race for the same subnet.
_cmp_pick_subnet() {
    local used=() line r start i c cand_first cand_last u_first u_last free
    while IFS= read -r line; do
        [[ -n "$line" ]] || continue
        r="$(_cmp_range "$line")" || continue # IPv6 and the like
        used+=("$r")
    done < <(_cmp_used_subnets)
    start=$(($(printf '%s' "$TERMGATE_COMPOSE_PROJECT" | cksum | cut -d' ' -f1) % 256))
    for ((i = 0; i < 256; i++)); do
        c=$(((start + i) % 256))
        read -r cand_first cand_last <<<"$(_cmp_range "10.250.$c.0/24")"
        free=1
        for r in "${used[@]}"; do
            read -r u_first u_last <<<"$r"
            if ((cand_first <= u_last && u_first <= cand_last)); then
                free=""
                break
            fi
        done
        if [[ -n "$free" ]]; then
            printf '10.250.%s.0/24\n' "$c"
            return 0
        fi
    done
    return 1
}
