# syntax=docker/dockerfile:1
#
# Atelier as a container: the same single binary `bun run build` makes, on a distroless base.
#   docker build -t atelier .
#   docker run -d --name atelier -p 8080:8080 -v atelier-data:/data atelier
#   docker exec atelier atelier user add you@example.com --credits 100
#   docker exec atelier atelier key create you@example.com
# A configuration file: -v "$PWD/atelier.toml:/etc/atelier/atelier.toml:ro" -e ATELIER_CONFIG=/etc/atelier/atelier.toml

# --- compile: one self-contained executable -------------------------------------------------
FROM oven/bun:1.4.5 AS build
WORKDIR /src
COPY package.json bun.lock bunfig.toml tsconfig.json ./
# Production dependencies only: the compiler needs nothing from devDependencies (types, tests).
RUN bun install --frozen-lockfile --production
COPY src ./src
# The commit shown by `atelier --version` and /healthz (.git is not in the build context):
#   docker build --build-arg ATELIER_COMMIT=$(git rev-parse --short HEAD) -t atelier .
ARG ATELIER_COMMIT=unknown
RUN bun run build \
 && mkdir -m 700 -p /out/data \
 && cp dist/atelier /out/atelier \
 && /out/atelier --help >/dev/null

# --- run: glibc and nothing else; no shell, no package manager -------------------------------
FROM gcr.io/distroless/base-debian12:nonroot
# OCI labels (https://github.com/opencontainers/image-spec/blob/main/annotations.md); the
# version is package.json's (test/shipping.test.ts keeps them equal), the revision the commit.
ARG ATELIER_COMMIT=unknown
LABEL org.opencontainers.image.title="Atelier" \
      org.opencontainers.image.description="OpenAI-compatible image generation and chat gateway in one binary" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.revision="${ATELIER_COMMIT}" \
      org.opencontainers.image.base.name="gcr.io/distroless/base-debian12:nonroot"
COPY --from=build /out/atelier /usr/local/bin/atelier
# The volume's mount point must belong to the non-root user (65532) so a fresh volume is writable,
# and be 0700 (made so above) like a data directory atelier creates itself.
COPY --from=build --chown=65532:65532 /out/data /data
ENV ATELIER_DATA=/data \
    ATELIER_HOST=0.0.0.0 \
    ATELIER_PORT=8080
USER 65532:65532
VOLUME ["/data"]
EXPOSE 8080
# distroless has no curl: the binary checks itself (GET /healthz on ATELIER_PORT).
HEALTHCHECK --interval=30s --timeout=6s --start-period=10s --retries=3 CMD ["/usr/local/bin/atelier", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/atelier"]
CMD ["serve"]
