# Multi-stage build: the dist binaries (whole-program optimisation) on a small non-root runtime image.
# Both binaries go to /usr/local/bin: `feature-connector produce` runs the load generator
# (`feature-connector-loadgen`, crate bench/loadgen) found beside its own executable.
# One cargo invocation builds both (the root package and bench/loadgen are the workspace's
# default members), so the libraries they share are compiled once.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --profile dist --locked --features feature-connector/jemalloc \
    --bin feature-connector --bin feature-connector-loadgen

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --no-create-home connector
COPY --from=build /src/target/dist/feature-connector /src/target/dist/feature-connector-loadgen /usr/local/bin/
USER 10001
WORKDIR /app
ENTRYPOINT ["feature-connector"]
