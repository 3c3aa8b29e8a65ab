# The workflow's software in one image: Python 3.11 and the pinned packages of pyproject.toml
# (torch 2.14.1 / torchvision 0.29.1, CUDA libraries as PyPI wheels), plus the CUDA 12 cuBLAS
# that CTranslate2 loads on the GPU (envs/translation.yaml). The pseudopairs code is not in the
# image: jobs run `python -m pseudopairs` from the clone's src/ (the Snakefile sets PYTHONPATH),
# so the image changes only when a pin does. Build it and turn it into the Apptainer image the
# workflow names (`containerized:` in workflow/Snakefile), see profiles/README.md ("Container"):
#   docker build -t pseudopairs:0.1.0 .
#   apptainer build pseudopairs.sif docker-daemon://pseudopairs:0.1.0
# tests/test_cluster.py checks that the pins below equal pyproject.toml's.
# Debian bookworm with Python 3.11.7 (as the project venv); it has bash, the shell Snakemake runs
# each job's command with.
FROM python:3.11.7-slim-bookworm

LABEL org.opencontainers.image.title="pseudopairs" \
      org.opencontainers.image.description="Software of the pseudopairs Snakemake workflow (Kádár et al., Bootstrapping Disjoint Datasets for Multilingual Multimodal Representation Learning)" \
      org.opencontainers.image.version="0.1.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg

RUN python -m pip install \
        torch==2.14.1 \
        torchvision==0.29.1 \
        numpy==2.4.6 \
        pandas==3.1.1 \
        pyarrow==26.0.1 \
        pillow==13.0.0 \
        PyYAML==6.0.3 \
        jsonschema==4.26.0 \
        sacremoses==0.2.0 \
        snakemake==9.27.1 \
        tqdm==4.70.1 \
        ctranslate2==4.8.5 \
        sacrebleu==2.6.0 \
        sentencepiece==0.2.3 \
        icu4py==1.2.0 \
        matplotlib==3.11.2 \
        safetensors==0.8.0 \
        fastapi==0.163.2 \
        uvicorn==0.54.0 \
        gensim==4.4.0 \
        scipy==1.17.1 \
        transformers==4.57.6 \
        protobuf==7.36.2 \
        nvidia-cublas-cu12==12.8.4.1 \
    && python -c "import torch, torchvision, ctranslate2, pandas, pyarrow, sacremoses, matplotlib, gensim, transformers, safetensors, fastapi, uvicorn"

CMD ["python"]
