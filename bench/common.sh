# Sourced by the bench scripts: a scratch directory, the release binary, the Java tools.
#   dir          BENCH_DIR, or a new scratch directory
#   KAAS         the kaas binary (built with --release unless KAAS names one)
#   cp, tool     the Java client and Kafka's tools: tool CLASS ARGS...
#   free_port    a free port whose successor is free too (Apache's controller listens on PORT+1)
dir=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$dir"
if [ ! -x "${KAAS:-}" ]; then
  cargo build --release -p kaas-server >&2
  KAAS=target/release/kaas
fi
cp=$(bash ci/clients/java/build.sh)
tool() { java -cp "$cp" "$@"; }
free_port() { python3 -c 'import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 1)); t.close(); print(p); break
    except OSError: pass'; }
