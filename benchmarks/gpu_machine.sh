#!/usr/bin/env bash
# On a GPU machine without TVM (see benchmarks/gpu_pack.sh), from the repository root:
# installs TVM's runtime and tvm-ffi from DIR under /tmp/egad_site, finds CUDA's
# libraries, then runs each further argument as `python -m benchmarks.gpu_run ARG`.
#     bash benchmarks/gpu_machine.sh .gpu "run .gpu/build --json=gpu_run.json" "profile .gpu/build"
set -u
DIR=$1
shift
SITE=/tmp/egad_site
mkdir -p "$SITE"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  "$DIR"/wheels/apache_tvm_ffi-*.whl 2>&1 | grep -v WARNING
tar xJf "$DIR/tvm_runtime.tar.xz" -C "$SITE" || exit 1
export PYTHONPATH=$SITE:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
# libtvm_runtime_cuda.so needs libcudart.so.13; NVRTC is loaded by cuda-bindings
LIBS=$(python3 -c "
import glob, os, site
dirs = set()
for root in [os.path.join(s, 'nvidia') for s in site.getsitepackages()] + ['/usr/local/cuda/lib64']:
    for pattern in ('libcudart.so.13*', 'libnvrtc.so.13*', 'libnvrtc-builtins.so.13*'):
        dirs.update(os.path.dirname(p) for p in glob.glob(os.path.join(root, '**', pattern), recursive=True))
print(':'.join(sorted(dirs)))")
export LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, numpy, tvm; print('python', sys.version.split()[0], 'numpy', numpy.__version__,
                                       'tvm', tvm.__version__, 'runtime only', tvm.base._RUNTIME_ONLY)"
status=0
for command in "$@"; do
  echo "== gpu_run $command"
  # (TVM prints a warning line per VM function it loads)
  python3 -m benchmarks.gpu_run $command 2>&1 | grep -v "executable.cc"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
exit $status
