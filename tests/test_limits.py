"""What no GPU can launch is refused as early as it is known (playground/engine/limits.py): before TileLang lowers
the kernel (threads asked for, a shared buffer alone too large), or once lowered, before nvcc (the pipeline's shared
memory), naming the figure, the limit and the line; never a kernel that would launch."""
from __future__ import annotations

from pathlib import Path

import pytest

from playground.engine.errors import StageError
from playground.engine.kernel import load

pytestmark = [pytest.mark.timeout(600)]

# A kernel of one's own whose tiles alone are 2 MiB each: lowered in seconds, then minutes of nvcc unrolling what no
# GPU could launch, before these checks.
HUGE_TILES = (Path(__file__).parent / "own_kernels" / "huge_tiles.py").read_text()


def _refusal(kernel, values: dict) -> StageError:
    from playground.engine.compile import build
    with pytest.raises(StageError) as caught:
        build(kernel, kernel.resolve(values), "sm_90a")
    assert caught.value.stage == "resources", caught.value
    return caught.value


def test_tiles_no_gpu_can_hold_are_refused_before_lowering_naming_the_buffer_its_line_and_the_limit(tmp_path):
    kernel = load("", HUGE_TILES, workdir=tmp_path)
    err = _refusal(kernel, {})
    assert "A_shared alone needs 2048 KiB" in err.message and "227 KiB" in err.message, err.message
    assert "refused before compiling" in err.message
    assert HUGE_TILES.splitlines()[err.line - 1].strip().startswith("A_shared = T.alloc_shared"), err.line


def test_more_threads_than_a_block_may_have_are_refused_before_lowering():
    err = _refusal(load("vector_add"), {"threads": 4096})
    assert "4096 threads per block" in err.message and "at most 1024" in err.message
    assert "refused before compiling" in err.message and err.line is not None


def test_a_pipelines_shared_memory_past_the_limit_is_refused_before_nvcc():
    """Each tile fits; four stages of them do not, which only the lowered kernel tells."""
    err = _refusal(load("gemm"), {"block_M": 256, "block_N": 256, "block_K": 128, "num_stages": 4,
                                  "warp_specialized": False})
    assert "512 KiB of shared memory" in err.message and "refused before nvcc" in err.message, err.message


@pytest.mark.parametrize("name, values", [("gemm", {}), ("gemm", {"warp_specialized": False}),
                                          ("softmax", {}), ("flash_attention", {})])
def test_the_lowered_kernels_figures_are_the_ones_ptxas_reports(name, values):
    """The check before nvcc reads the compiled kernel's threads, and shared bytes no more than it has (ptxas adds
    the mbarriers' and alignment's kilobyte at most): it never refuses what would launch."""
    import importlib

    from playground.engine import limits
    from playground.engine.compile import build
    kernel = load(name)
    seen = []
    lower = importlib.import_module("tilelang.engine.lower")
    original = lower.lower_to_host_device_ir

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(limits.lowered_resources(out[1]))
        return out
    lower.lower_to_host_device_ir = spy
    try:
        built = build(kernel, kernel.resolve(values), "sm_90a")
    finally:
        lower.lower_to_host_device_ir = original
    resources = built.result["resources"]
    assert seen and seen[0]["threads"] == resources["threads"]
    assert resources["shared_bytes"] - 2048 <= (seen[0]["shared_bytes"] or 0) <= resources["shared_bytes"], seen
