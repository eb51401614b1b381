# node:22-bookworm-slim's part here, for the models job's `npm pack`: Debian's Node.js (imported from mmdebstrap's root
# file system) and npm itself from the npm registry (Debian's npm package pulls in some 400 packages).
ARG BASE
FROM ${BASE}
COPY npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm && npm --version
CMD ["node"]
