# One image for every component: `podmortem aggregator`, `podmortem webhook`, `podmortem sidecar`.
# `make image IMAGE=... TAG=...` builds the wheel (python -m build --wheel), then this; the image is not
# published: push it to a registry of yours (`make push`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY dist/podmortem-*.whl /tmp/
RUN pip install /tmp/podmortem-*.whl && rm /tmp/podmortem-*.whl

# Numeric non-root user (65532, as the chart's runAsUser) so runAsNonRoot can verify it.
RUN groupadd --system --gid 65532 podmortem \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent podmortem
USER 65532:65532

ENTRYPOINT ["podmortem"]
CMD ["--help"]
