"""The program Nsight Compute and compute-sanitizer run: compile the kernel, launch it, record how its SASS maps to
the user's lines.

    python -m playground.engine.profile_target SPEC.json

SPEC (written by playground.engine.profile): kernel, source_file, dtype, tile, problems, arch, out, mode, guards,
seed. For each problem it writes OUT/build-<i>.json (the line map and the SASS line table of what it launched);
on an error OUT/error.json ({"stage", "message", "line", "log"}) and exit status 1.

mode "profile": one warm-up launch, then exactly one launch between cudaProfilerStart and cudaProfilerStop, the only
one `ncu --profile-from-start off` sees (making the inputs launches PyTorch kernels of its own).
mode "check": one launch per problem; the sanitizer checks every launch.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    out = Path(spec["out"])
    from .errors import StageError, clip, format_exception
    try:
        import torch
        from .kernel import Config, load_file
        from .measure import Runner, device_error
        from .profile import build_with_line_table
        kernel = load_file(spec["kernel"], Path(spec["source_file"]))
        for i, problem in enumerate(spec["problems"]):
            config = Config(problem, spec["dtype"], spec["tile"])
            jit, info = build_with_line_table(kernel, config, spec["arch"], out, spec.get("guards", True))
            (out / f"build-{i}.json").write_text(json.dumps(info))
            runner = Runner(kernel, config, jit, int(spec.get("seed") or 0))
            try:
                if spec["mode"] == "profile":
                    runner()
                    torch.cuda.synchronize()
                    torch.cuda.cudart().cudaProfilerStart()
                    runner()
                    torch.cuda.synchronize()
                    torch.cuda.cudart().cudaProfilerStop()
                else:
                    runner()
                    torch.cuda.synchronize()
            except Exception as exc:
                raise device_error(exc) from None
    except StageError as err:
        (out / "error.json").write_text(json.dumps(err.to_json()))
        return 1
    except Exception as exc:
        (out / "error.json").write_text(json.dumps(StageError("internal", f"{type(exc).__name__}: {exc}"[:500], None,
                                                              clip(format_exception(exc))).to_json()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
