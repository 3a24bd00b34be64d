"""A machine with no CUDA toolkit compiles: nvcc, ptxas and the CUDA headers come from NVIDIA's pip wheels
(requirements.txt), which TileLang finds when neither CUDA_HOME nor an nvcc on PATH names a toolkit.

The compile runs in a child process whose PATH holds no nvcc (whatever toolkit this machine has is hidden) and whose
environment has no CUDA_HOME, as on a fresh machine after `make setup`, and as in the image, which has no toolkit."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PROBE = """
import json, shutil
import tilelang.env
from playground.engine.compile import compile_kernel, find_cuda_tool
from playground.engine.kernel import loader
kernel = loader.load("gemm")
result = compile_kernel(kernel, kernel.resolve({"M": 256, "N": 256, "K": 256}), "sm_90a")
print(json.dumps({"cuda_home": tilelang.env.CUDA_HOME, "nvcc_on_path": shutil.which("nvcc"),
                  "ptxas": find_cuda_tool("ptxas"), "ok": result["ok"], "ptx": result.get("ptx", ""),
                  "registers": result.get("resources", {}).get("registers")}))
"""


def path_without_nvcc() -> str:
    """The venv's bin and the system's, less every folder that holds an nvcc (a toolkit's, or a shim to one)."""
    dirs = [str(Path(sys.executable).parent), *os.environ.get("PATH", "").split(":"), "/usr/bin", "/bin"]
    return ":".join(d for d in dict.fromkeys(dirs) if d and not os.path.exists(os.path.join(d, "nvcc")))


def wheel_nvcc() -> Path | None:
    """The nvcc of the nvidia-cuda-nvcc wheel installed beside this Python's packages, if there is one."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / "cu13" / "bin" / "nvcc").exists():
            return Path(folder) / "cu13" / "bin" / "nvcc"
    return None


def without_toolkit(probe: str, tmp_path: Path) -> dict:
    """Run `probe` in a child process that sees no CUDA toolkit; the JSON it prints last."""
    if wheel_nvcc() is None:
        pytest.skip("the nvidia-cuda-nvcc wheel is not installed here (requirements.txt installs it)")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    python_path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(PATH=path_without_nvcc(), PYTHONPATH=os.pathsep.join(dict.fromkeys(python_path)), HOME=str(tmp_path),
               PLAYGROUND_CACHE_DIR=str(tmp_path / "cache"), TILELANG_CACHE_DIR=str(tmp_path / "tilelang-cache"))
    proc = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_gemm_compiles_with_the_wheels_nvcc_when_no_toolkit_is_visible(tmp_path):
    found = without_toolkit(PROBE, tmp_path)
    wheels = Path(sys.executable).parent.parent  # the venv: the wheels live in its site-packages
    assert found["nvcc_on_path"] is None, "the toolkit was not hidden"
    assert Path(found["cuda_home"]).is_relative_to(wheels) and (Path(found["cuda_home"]) / "bin" / "nvcc").exists(), \
        f"TileLang did not take nvcc from the nvidia-cuda-nvcc wheel: CUDA_HOME={found['cuda_home']!r}"
    assert Path(found["ptxas"]).is_relative_to(found["cuda_home"]), found["ptxas"]
    assert found["ok"] and "wgmma.mma_async" in found["ptx"], "the Hopper GEMM did not compile through the wheel"
    assert found["registers"], "ptxas from the wheel gave no resource figures"


RUN_PROBE = """
import json
import tilelang.env
from playground.engine.kernel import loader
from playground.engine.run import run
kernel = loader.load("gemm")
result = run(kernel, kernel.resolve({"M": 1024, "N": 1024, "K": 1024}))
print(json.dumps({"cuda_home": tilelang.env.CUDA_HOME, "ok": result["ok"], "error": result.get("error"),
                  "checks": [v["passed"] for v in result["verification"]]}))
"""


@pytest.mark.gpu
def test_the_gemm_the_wheels_nvcc_built_verifies_on_the_gpu(tmp_path):
    """The wheel's nvcc is newer than the CUDA a GPU host's driver may support: what it builds must still load and
    compute the right product there."""
    found = without_toolkit(RUN_PROBE, tmp_path)
    assert Path(found["cuda_home"]).parts[-2:] == ("nvidia", "cu13"), f"not the wheel's nvcc: {found['cuda_home']}"
    assert found["ok"], found["error"]
    assert len(found["checks"]) >= 2 and all(found["checks"]), found["checks"]
