# syntax=docker/dockerfile:1
#
# One Dockerfile, two images, one per service:
#
#   docker build --target order-service -t msa-lab/order-service .
#   docker build --target user-service  -t msa-lab/user-service  .
#
# docker compose builds both (docker-compose.yml). Needs BuildKit, which
# `docker compose` and `docker build` use by default.
#
# Dependency caching: the builder keeps cargo's registry and the target/
# directory in BuildKit cache mounts, so a rebuild after a code change
# recompiles only the workspace's own crates, not the ~300 dependencies. This
# needs no stub sources that would have to follow every crate added to the
# workspace. Both binaries come out of one `cargo build`, which the two
# targets share: BuildKit runs the builder stage once.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# --- build ------------------------------------------------------------------
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
WORKDIR /src

# Only what the build reads: the workspace manifests and lock file, every
# crate (cargo resolves the whole workspace, even for `-p`), proto/ (compiled
# by crates/libs/proto/build.rs with a vendored protoc: no system protoc) and
# migrations/ (embedded in the binaries by sqlx::migrate!). .dockerignore keeps
# target/, .git and the rest out of the context.
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
COPY crates ./crates
COPY proto ./proto
COPY migrations ./migrations

# The cache mounts are not part of the image: the binaries are copied out of
# target/ in the same step.
RUN --mount=type=cache,id=msa-lab-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=msa-lab-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=msa-lab-target,target=/src/target,sharing=locked \
    cargo build --release --locked -p order-service -p user-service \
 && mkdir -p /out \
 && cp target/release/order-service target/release/user-service /out/

# --- run ------------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# ca-certificates only: the services speak plain TCP to each other, to
# Postgres and to Jaeger, but a TLS endpoint given later must not fail for
# want of roots. Nothing is added for health checks: docker-compose.yml's
# checks use bash's /dev/tcp (bash, head and grep are in every Debian image)
# to send `GET /readyz` and read the status line, so the image carries no
# curl or wget.
# Unpinned on purpose: Debian's security updates replace the exact version.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# Not root: a fixed unprivileged uid/gid, given by number to USER so that a
# runtime can check it is not 0 without reading /etc/passwd.
RUN groupadd --gid 10001 app \
 && useradd --uid 10001 --gid app --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin app
USER 10001:10001
ENV RUST_LOG=info

FROM runtime AS order-service
COPY --from=builder /out/order-service /usr/local/bin/order-service
# REST (HTTP/1.1 + h2c), gRPC (+ gRPC-web), raw TCP: ORDER_REST_ADDR,
# ORDER_GRPC_ADDR and ORDER_TCP_ADDR change them.
EXPOSE 8082 50052 50062 8443/udp
# Exec form: the service is PID 1 and gets SIGTERM itself, which drains
# requests and streams in flight before it exits.
ENTRYPOINT ["/usr/local/bin/order-service"]

FROM runtime AS user-service
COPY --from=builder /out/user-service /usr/local/bin/user-service
# REST (HTTP/1.1 + h2c) and gRPC: USER_REST_ADDR and USER_GRPC_ADDR change them.
EXPOSE 8081 50051
ENTRYPOINT ["/usr/local/bin/user-service"]
