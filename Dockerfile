# The trajforge worker image: a Prefect process worker with trajforge installed.
FROM python:3.11.10-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
WORKDIR /app
# torch first and pinned, so nothing later pulls a different (CUDA) build.
RUN pip install torch==2.13.0
COPY pyproject.toml README.md ./
COPY trajforge ./trajforge
COPY flows ./flows
COPY querygen ./querygen
COPY rollout ./rollout
COPY critics ./critics
COPY curation ./curation
COPY storage ./storage
COPY publish ./publish
COPY annotation ./annotation
COPY evolve ./evolve
COPY deploy ./deploy
RUN pip install . && useradd --create-home trajforge
USER trajforge
CMD ["prefect", "worker", "start", "--pool", "trajforge", "--type", "process"]
