# Sourced by deploy/image/build and the image tests' runner: which container engine to use.

# podman's settings for this kind of machine, unless the caller has its own
if [ -z "${CONTAINERS_CONF:-}" ]; then
    export CONTAINERS_CONF="$PWD/deploy/image/containers.conf"
fi

# need COMMAND PACKAGE: COMMAND exists, or is installed from Debian's PACKAGE when root
need() {
    command -v "$1" >/dev/null && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "image: installing Debian's $2" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$2" >/dev/null \
            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y -q --no-install-recommends "$2" >/dev/null; }
        command -v "$1" >/dev/null && return 0
    fi
    echo "image: '$1' is missing: install it (Debian: apt-get install $2) and run again" >&2
    exit 1
}

# docker when its daemon answers; else podman (with runc and buildah), installed if need be
container_engine() {
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
        echo docker
        return
    fi
    need podman podman
    need runc runc
    need buildah buildah
    echo podman
}
