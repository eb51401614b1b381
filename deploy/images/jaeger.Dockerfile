# jaegertracing/all-in-one's part here: Jaeger (built from its Go module; in memory, OTLP in on 4317/4318, the query
# API on 16686) on Debian slim, listening on every interface as the official image does.
FROM debian:bookworm-slim
COPY jaeger /usr/local/bin/jaeger
ENV JAEGER_LISTEN_HOST=0.0.0.0
EXPOSE 4317 4318 16686
ENTRYPOINT ["jaeger"]
