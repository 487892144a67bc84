# Multi-stage build: the dist binary (whole-program optimisation) on a small non-root runtime image.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --profile dist --locked --features jemalloc --bin feature-connector

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --no-create-home connector
COPY --from=build /src/target/dist/feature-connector /usr/local/bin/feature-connector
USER 10001
WORKDIR /app
ENTRYPOINT ["feature-connector"]
