# One image per deployable: docker build --build-arg DEPLOYABLE=watcher -t wm-watcher .
# (or --target watcher / apiserver / compiler / stagectl / inference-auth). The simulator (sim/)
# and the tests are never copied into an image.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
RUN useradd --system --uid 10001 --no-create-home wm
COPY pyproject.toml ./
COPY shared ./shared
COPY watcher ./watcher
COPY apiserver ./apiserver
COPY compiler ./compiler
COPY stagectl ./stagectl
COPY inference_auth ./inference_auth
RUN pip install . && rm -rf /root/.cache
USER 10001
EXPOSE 8120 8121

FROM base AS watcher
ENTRYPOINT ["wm-watcher"]
FROM base AS apiserver
ENTRYPOINT ["wm-apiserver"]
# The compiler reads Git-defined pipelines with git (https only; docs/operations.md, "Git sync").
FROM base AS compiler
USER root
RUN apt-get update && apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*
USER 10001
ENTRYPOINT ["wm-compiler"]
FROM base AS stagectl
ENTRYPOINT ["wm-stagectl"]
FROM base AS inference-auth
ENTRYPOINT ["wm-inference-auth"]

# Default target: the deployable named by the build arg.
FROM base AS deployable
ARG DEPLOYABLE=apiserver
ENV WM_DEPLOYABLE=${DEPLOYABLE}
USER root
RUN if [ "$DEPLOYABLE" = compiler ]; then apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*; fi
USER 10001
ENTRYPOINT ["sh", "-c", "exec python -m \"$WM_DEPLOYABLE\""]
