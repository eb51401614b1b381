# nats:2.15.2-alpine's part here: nats-server (built from its Go module at the version go.mod pins) on Debian slim,
# whose sh and wget the compose file's entrypoint and health check use, as Alpine's busybox does.
FROM debian:bookworm-slim
COPY nats-server /usr/local/bin/nats-server
EXPOSE 4222 6222 8222
ENTRYPOINT ["nats-server"]
CMD ["--config", "/etc/nats/nats-server.conf"]
