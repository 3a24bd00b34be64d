# HOSTILE: a well-formed compile answer of 31 MiB (its CUDA 30 MiB) written on the job's answer pipe, at import time
# EXPECT: stage=python; message=its answer was larger than 8 MiB
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# (its size in MiB, _MIB, is set lower by the test that reads an answer under the limit)
# ---- HOSTILE (answer_huge): a well-formed answer far larger than any kernel's, then the job ends
import json as _json
import os
_MIB = 31
_line = "  C[((int)blockIdx.x) * 256 + ((int)threadIdx.x)] = A[((int)threadIdx.x)] + B[((int)threadIdx.x)];  // /job/x\n"
_text = "extern \"C\" __global__ void main_kernel(half_t* A, half_t* B, half_t* C) {\n" + \
    _line * ((_MIB - 1) * 2**20 // len(_line)) + "}\n"
_small = _text[:2**20 // 3]
_answer = {"ok": True, "kernel": "vector_add", "cuda": _text, "ptx": _small, "sass": _small, "host": _small,
           "ptxas_log": "", "resources": {"registers": 16}, "line_map": [], "error": None}
_data = memoryview((_json.dumps({"result": _answer}) + "\n").encode())
_others = {os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)}
for _fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
    try:
        _target = os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:
        continue
    if _target.startswith("pipe:") and _target not in _others:
        while _data:
            _data = _data[os.write(_fd, _data):]
        os._exit(0)
# ---- end of the hostile part
