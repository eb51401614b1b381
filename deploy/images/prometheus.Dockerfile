# prom/prometheus's part here: Debian's Prometheus server on Debian slim, laid out as the official image is (the
# binary as entrypoint, the store under /prometheus, owned by and run as nobody).
FROM debian:bookworm-slim
COPY prometheus /bin/prometheus
RUN mkdir -p /prometheus /etc/prometheus && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
