# Sourced by ci/security.sh and ci/acls.sh: the release binary, Kafka's Java tools (`tool`),
# the Python clients' venv, a work directory and the broker processes cleaned up on exit,
# free ports, and `fail`, which prints the brokers' logs.
KAAS=${KAAS:-target/release/kaas}
[ -x "$KAAS" ] || cargo build --release -p kaas-server
cp=$(bash ci/clients/java/build.sh)
tool() { java -cp "$cp" "$@"; }
if [ ! -x ci/.venv/bin/python ]; then
  python3 -m venv ci/.venv
  ci/.venv/bin/pip install --quiet -r ci/clients/requirements.txt
fi
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { echo "FAIL: $*"; for log in "$work"/*.log; do echo "--- $log"; tail -20 "$log"; done; exit 1; }
