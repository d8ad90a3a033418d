# Build: a release binary with the Swift runtime linked in statically.
FROM swift:6.3-bookworm AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libmicrohttpd-dev libsqlite3-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN swift build -c release --product herald --static-swift-stdlib \
    && mkdir -p /staging \
    && cp "$(swift build -c release --show-bin-path)/herald" /staging/
# The crash backtracer the official Swift server images ship beside the binary.
RUN if [ -x /usr/libexec/swift/linux/swift-backtrace-static ]; then cp /usr/libexec/swift/linux/swift-backtrace-static /staging/; fi

# Run: only the shared libraries the binary needs (migrations and openapi.yaml are embedded).
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libmicrohttpd12 libsqlite3-0 ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin herald \
    && mkdir -p /app /data && chown herald /data
COPY --from=build /staging/ /usr/local/bin/
WORKDIR /app
ENV HERALD_HOST=0.0.0.0 \
    HERALD_PORT=8080 \
    HERALD_DATA_DIR=/data \
    SWIFT_BACKTRACE=enable=yes,sanitize=yes,threads=all,images=all,interactive=no,swift-backtrace=/usr/local/bin/swift-backtrace-static
VOLUME /data
EXPOSE 8080
USER 10001
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["herald", "healthcheck"]
ENTRYPOINT ["herald"]
CMD ["serve"]
