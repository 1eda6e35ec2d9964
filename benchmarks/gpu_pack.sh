#!/usr/bin/env bash
# Packs into DIR (default .gpu) what `python -m benchmarks.gpu_run run` needs on a GPU
# machine with Python 3.12, numpy and CUDA 13 (driver, cudart, and NVRTC through the
# cuda-bindings package) but no TVM: TVM's runtime alone (the pinned apache-tvm wheel
# without its 260 MB compiler library, 3 MB compressed), the pinned apache-tvm-ffi wheel
# for CPython 3.12, and the optimizer benchmark's CUDA builds, exported here
# (benchmarks/gpu_run.py export). Needs egad installed here (`make setup`) and pip's
# index. Then, on the GPU machine, from a copy of this repository that holds DIR:
#     bash benchmarks/gpu_machine.sh DIR "run DIR/build --json=gpu_run.json" "profile DIR/build"
set -euo pipefail
DIR=${1:-.gpu}
ARCH=${ARCH:-sm_90}  # the H100 and H200
PY=${PYTHON:-.venv/bin/python}
pin() { grep -o "\"$1==[^\"]*\"" pyproject.toml | tr -d '"' | head -1; }
mkdir -p "$DIR/wheels"
rm -f "$DIR"/wheels/*.whl
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 -d "$DIR/wheels" \
  "$(pin apache-tvm)" "$(pin apache-tvm-ffi)"
"$PY" - "$DIR" <<'PYTHON'
import glob, io, sys, tarfile, zipfile
directory = sys.argv[1]
(wheel,) = glob.glob(f"{directory}/wheels/apache_tvm-*.whl")
with zipfile.ZipFile(wheel) as source, tarfile.open(f"{directory}/tvm_runtime.tar.xz", "w:xz") as packed:
    for item in source.infolist():
        name = item.filename
        if not name.startswith("tvm/") or name.startswith("tvm/3rdparty/") or name.endswith("libtvm_compiler.so"):
            continue
        data = source.read(item)
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o755 if name.endswith(".so") else 0o644
        packed.addfile(info, io.BytesIO(data))
PYTHON
rm "$DIR"/wheels/apache_tvm-*.whl
rm -rf "$DIR/build"
"$PY" -m benchmarks.gpu_run export "$DIR/build" --target=cuda --arch="$ARCH" 2>&1 | grep -v "Warning"
du -sh "$DIR"
