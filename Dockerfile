# kvindex image: kvindex-router, kvindex-agent and kvindex-ctl on Debian 12.
#
#   docker build -t kvindex:0.1.0 .
#   docker run --rm kvindex:0.1.0 kvindex-router --help
#
# Stage 1 builds with the project's own dependency script (the same packages
# as a developer machine and CI); stage 2 holds only the binaries and the
# shared libraries they load. The runtime package list below is checked
# against `ldd` of the built binaries by tests/helm/dockerfile_runtime_test.py
# (ctest -L helm): a library added to the build without its package here
# fails that test.

FROM debian:12 AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# Dependencies first: this layer is reused until install-deps.sh changes.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVINDEX_BUILD_TESTS=OFF \
 && cmake --build /build --target kvindex-router kvindex-agent kvindex-ctl \
 && install -d /out \
 && install -m 0755 -s /build/bin/kvindex-router /build/bin/kvindex-agent /build/bin/kvindex-ctl /out/

FROM debian:12-slim
ENV DEBIAN_FRONTEND=noninteractive
# runtime-packages: the Debian packages of every shared library the binaries
# load (ldd; dpkg -S maps each .so to its package), plus ca-certificates for
# NATS over TLS with public CAs. One package per line.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      libabsl20220623 \
      libbz2-1.0 \
      libc-ares2 \
      libc6 \
      libcivetweb1 \
      libfmt9 \
      libgrpc++1.51 \
      libgrpc29 \
      libgcc-s1 \
      liblz4-1 \
      libnats3.4 \
      libpcre2-8-0 \
      libprometheus-cpp-core1.0 \
      libprotobuf32 \
      libre2-9 \
      libsimdjson14 \
      libsnappy1v5 \
      libspdlog1.10 \
      libssl3 \
      libstdc++6 \
      libutf8proc2 \
      libxxhash0 \
      libyaml-cpp0.7 \
      libzmq5 \
      libzstd1 \
      zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 kvindex \
 && useradd --system --uid 65532 --gid kvindex --home-dir /var/lib/kvindex --no-create-home \
      --shell /usr/sbin/nologin kvindex \
 && install -d -o kvindex -g kvindex -m 0750 /var/lib/kvindex
COPY --from=build /out/ /usr/local/bin/
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /var/lib/kvindex
# The router checkpoints here (--data-dir); mount a volume (the Helm chart
# mounts a PVC).
VOLUME ["/var/lib/kvindex"]
EXPOSE 8080 9101
CMD ["kvindex-router", "--help"]
