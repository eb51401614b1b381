# prom/prometheus's part here: Debian's Prometheus server on Debian slim, laid out as the official image is (the
# binary as entrypoint, the store under /prometheus, owned by and run as nobody). Debian's build stores in
# /var/lib/prometheus/metrics2 unless told: linked to /prometheus.
FROM debian:bookworm-slim
COPY prometheus /bin/prometheus
RUN mkdir -p /prometheus /etc/prometheus /var/lib/prometheus && chown nobody:nogroup /prometheus && \
    ln -s /prometheus /var/lib/prometheus/metrics2
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
