# hayate in a container: built from this tree, run as an unprivileged user.
#   docker build -t hayate .
#   docker run -p 8080:8080 -v "$PWD/public:/srv/www:ro" hayate
# With a config file: -v "$PWD/hayate.toml:/etc/hayate/hayate.toml:ro" and
# the arguments --config /etc/hayate/hayate.toml.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p hayate \
    && install -m 0755 target/release/hayate /usr/local/bin/hayate

FROM debian:bookworm-slim
# ca-certificates: https upstreams and ACME are verified against them.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/hayate hayate
COPY --from=build /usr/local/bin/hayate /usr/local/bin/hayate
USER 10001
# Certificates from ACME or the local CA live here; mount a volume to keep
# them across containers.
ENV HAYATE_STATE_DIR=/var/lib/hayate
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/hayate"]
CMD ["/srv/www", "--listen", "0.0.0.0:8080"]
