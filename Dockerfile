# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target runner -t perfcheck-runner:0.1.0 .   # GPU runner: CUDA torch + perfcheck
#   docker build --target bot -t perfcheck-bot:0.1.0 .         # plan/report/publish/serve, no torch
# Choose torch/CUDA with --build-arg TORCH_IMAGE=pytorch/pytorch:<torch>-cuda<cuda>-cudnn9-runtime.
ARG TORCH_IMAGE=pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# What both images install: the package's sources and the install script (also run by .ci/check-install).
FROM scratch AS source
COPY pyproject.toml README.md LICENSE constraints.txt /src/
COPY perfcheck /src/perfcheck
COPY docker/install-perfcheck.sh /src/docker/install-perfcheck.sh

FROM ${TORCH_IMAGE} AS runner
ARG PERFCHECK_UID=1001
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1
COPY --from=source /src /src
RUN PYTHON=python sh /src/docker/install-perfcheck.sh runner /src \
    && useradd --create-home --uid "${PERFCHECK_UID}" perfcheck
# Probes run PR code: as a user without root, in the workspace the job mounts.
USER ${PERFCHECK_UID}
WORKDIR /home/perfcheck
ENTRYPOINT ["perfcheck"]
CMD ["--help"]

FROM ${PYTHON_IMAGE} AS bot
ARG PERFCHECK_UID=1001
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1
COPY --from=source /src /src
RUN PYTHON=python sh /src/docker/install-perfcheck.sh bot /src \
    && useradd --create-home --uid "${PERFCHECK_UID}" perfcheck
USER ${PERFCHECK_UID}
WORKDIR /home/perfcheck
EXPOSE 8080
ENTRYPOINT ["perfcheck"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
