#!/usr/bin/env bash
# Installs every Debian package kvindex needs to build, test and run its demo.
# Idempotent: skips packages that are already present. Runs as root (no sudo
# needed) or through sudo when invoked by another user.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache clang clang-format
  libclang-rt-14-dev llvm git
  # messaging and storage
  libnats-dev nats-server libssl-dev openssl libzmq3-dev cppzmq-dev libmsgpack-cxx-dev librocksdb-dev
  # libraries
  prometheus-cpp-dev libcivetweb-dev libxxhash-dev libabsl-dev libcli11-dev
  libsimdjson-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev
  libboost-dev
  # the endpoint picker's gRPC (ext_proc) server, and its test harness
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc python3-grpcio
  python3-protobuf
  # the chat-template exactness test renders with Jinja2 (shared/tokenize/chat_template)
  python3-jinja2
  # tokenizer (shared/tokenize): split patterns, Unicode normalization
  libpcre2-dev libutf8proc-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3 python3-zmq python3-msgpack python3-xxhash
  wrk curl
  # the reliability suite's clock skew (tests/reliability): LD_PRELOAD faked clocks
  libfaketime iproute2
  # the routing-quality report's plot (scripts/routing-report.sh)
  gnuplot-nox
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
