# The steps every client-environment script shares (skyrl_client_env.sh, prime_client_env.sh,
# areal_client_env.sh, verl_env.sh), sourced by each after it sets:
#   NAME   what the environment holds, for messages ("AReaL's client")
#   VENV   its folder
#   PINS   the packages, each pinned, installed without dependency resolution
#   CHECK  Python that must run in it (the client's imports)
#   WANT   what decides whether a built environment is current (by default the pins)
# An environment is rebuilt from nothing whenever WANT changes; otherwise a run only re-checks CHECK.

# python_of VERSION CANDIDATE...: print the first candidate that is Python VERSION ("3.11")
python_of() {
  local version="$1" candidate
  shift
  for candidate in "$@"; do
    if [ -n "$candidate" ] && [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$version" ]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

# exit_if_current: exit 0 where VENV was built for WANT and CHECK still runs in it
exit_if_current() {
  local stamp="$VENV/.specroll-pins"
  if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$WANT" ] \
    && "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
    echo "the environment of $NAME is ready: $VENV"
    exit 0
  fi
}

# new_env PYTHON: VENV made anew with PYTHON
new_env() {
  echo "building the environment of $NAME in $VENV with $1"
  rm -rf "$VENV"
  "$1" -m venv "$VENV"
}

# install_pins: PINS into VENV, no dependency resolution
install_pins() {
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${PINS[@]}"
}

# finish_env: CHECK must run in VENV; then the stamp that makes the next run a check only
finish_env() {
  if ! "$VENV/bin/python" -c "$CHECK"; then
    echo "error: $NAME does not import in $VENV ($CHECK)" >&2
    exit 1
  fi
  printf '%s\n' "$WANT" >"$VENV/.specroll-pins"
  echo "the environment of $NAME is ready: $VENV"
}
