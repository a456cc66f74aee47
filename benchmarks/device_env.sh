#!/usr/bin/env bash
# Prepares the Python environment for the GPU checks on a machine without internet whose `python` already
# has torch, transformers and triton (the lent H200 has them in /opt/torch/.venv, Python 3.12): our other
# dependencies are installed into it from a wheelhouse made beforehand where there is a package index:
#   pip download -d build/gpu-wheels --no-deps --only-binary=:all: --python-version 3.X ... (see docs/benchmarks.md)
# Prints the versions it ends up with. Usage: source benchmarks/device_env.sh [WHEELHOUSE]
wheels=${1:-build/gpu-wheels}
have_tf=${HAVE_TF:-$(python -c "import transformers; print(transformers.__version__)" 2>/dev/null || echo none)}
extra=()
case $have_tf in 5.2[4-9]*|5.[3-9]*) ;; *) extra=(transformers==5.24.0 tokenizers==0.23.3 huggingface-hub==2.4.0 httpx2 httpcore2 truststore hf-xet fsspec safetensors) ;; esac
# --no-deps: the wheelhouse holds exactly these; what they need beyond them (numpy, filelock, ...) comes
# with torch and transformers
wanted=(pydantic pydantic-core annotated-types typing-inspection typing-extensions pyyaml rich markdown-it-py
  mdurl pygments psutil pyflakes pytest pytest-timeout pluggy iniconfig docker requests urllib3 charset-normalizer
  idna certifi fastapi starlette annotated-doc opentelemetry-api importlib-metadata zipp anyio sniffio h11 httpx
  httpcore uvicorn click jinja2 markupsafe gymnasium cloudpickle farama-notifications openai distro jiter tqdm
  regex filelock packaging "${extra[@]}")
if python -m pip --version >/dev/null 2>&1; then
  python -m pip install -q --no-deps --no-index --find-links "$wheels" "${wanted[@]}" 2>&1 | tail -5
else  # a venv made by uv has no pip module
  uv pip install -q --python "$(command -v python)" --no-deps --no-index --find-links "$wheels" "${wanted[@]}" 2>&1 | tail -5
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python - <<'PY'
import platform, torch, transformers
print("python", platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
PY
