# Sourced by the scripts that make sure a tool is here (gstreamer.sh,
# iperf3.sh). `apt_ensure NAME PACKAGE...`: unless the caller's `have`
# already holds, installs the Debian PACKAGEs with apt-get (updating its
# lists once if the first try fails), as root or through passwordless
# sudo, one caller at a time (tests may ask at the same time; one
# installs, the others wait on a lock named after NAME). An optional
# `preseed` function of the caller runs first, given the sudo prefix, to
# answer the packages' questions. Never fails: the caller checks `have`
# again and says what to install where it could not.
apt_ensure() {
  local name=$1
  shift
  have && return 0
  command -v apt-get >/dev/null 2>&1 || return 0
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo -n)
  exec 9>"${TMPDIR:-/tmp}/groupwire-$name.lock"
  flock 9
  have && return 0
  export DEBIAN_FRONTEND=noninteractive
  if declare -F preseed >/dev/null; then preseed "${sudo[@]}"; fi
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "$@" >&2 \
    || { "${sudo[@]}" apt-get update -q >&2 && "${sudo[@]}" apt-get install -y -q --no-install-recommends "$@" >&2; } \
    || true
}
