"""How fast is it? Time a kernel and its baselines the same way, in the same process, interleaved.

- Each sample is one call bracketed by CUDA events, after a read of a buffer larger than L2 so that every sample
  starts with a cold cache, as a real workload's first touch of its data would. A read, not a write (`zero_()`, as
  many benchmark harnesses flush): a write leaves L2 full of dirty lines, and the timed kernel, evicting them, pays
  for writing them back to memory. Measured on an H100, that cost vector add at 2^24 elements (96 MB) a fifth of
  its time (0.85 of copy bandwidth with the write flush, 1.0 with the read), torch.add alike: the flush's cost, not
  the kernel's.
- Warm-up calls come first (module load, autotuned library heuristics and clocks settle there).
- The functions take turns sample by sample, so a change of clock or a neighbour's load hits them all alike.
- Every timed call of a kernel can start from poisoned outputs (`prepare`, run before the flush, outside the
  events), and calls picked at random can be checked afterwards (`audit`, after the end event): a kernel that
  skips its work when the outputs already hold values, or on some calls only, is then caught, not timed as fast.
  Which calls are checked is drawn from the operating system's random source, so nothing in the kernel's reach
  (a call count, the clock) tells it which.
- We report the median and the 20th/80th percentiles; the mean is hostage to one slow sample.
- Graph mode, for kernels of a few microseconds: `graph_calls` back-to-back calls are captured in one CUDA graph and
  replayed, so launch overhead is paid once per replay; the per-call time is the replay's over `graph_calls` (the
  first call of each replay finds a cold L2, the rest a warm one).
"""
from __future__ import annotations

import random
import statistics
from typing import Callable

import torch

FLUSH_BYTES = 256 * 1024 * 1024  # several times the H200's 60 MB L2


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(times_ms: list[float]) -> dict:
    s = sorted(times_ms)
    return {"median_ms": statistics.median(s), "p20_ms": _percentile(s, 0.2), "p80_ms": _percentile(s, 0.8),
            "min_ms": s[0], "mean_ms": statistics.fmean(s), "samples": len(s)}


AUDIT_ALL_UP_TO = 32   # samples: below this many, every timed call is checked
AUDIT_FRACTION = 0.25  # above it, about this share of them, and always the last


def audit_plan(samples: int, rng: random.Random | None = None) -> set[int]:
    """Which of `samples` timed calls are checked: all of few, else a random quarter and the last. A kernel that
    skips its work on half the calls (what it takes to move the median) escapes 16 checks one time in 65536."""
    if samples <= AUDIT_ALL_UP_TO:
        return set(range(samples))
    rng = rng or random.SystemRandom()
    return {i for i in range(samples) if rng.random() < AUDIT_FRACTION} | {samples - 1}


class Timer:
    def __init__(self, device: str = "cuda"):
        self.device = device
        # float32 in, float32 out: a sum that changes the dtype would first write a converted copy of the buffer
        self.flush_buffer = torch.zeros(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
        self.flush_sum = torch.zeros((), dtype=torch.float32, device=device)

    def flush(self) -> None:
        torch.sum(self.flush_buffer, dim=0, out=self.flush_sum)  # reads all of it: L2 is left holding clean lines only

    def _estimate_ms(self, fn: Callable[[], object]) -> float:
        # A first call, untimed: it may load a module, create a cuBLAS handle or (torch.compile) compile for tens of
        # seconds, which would make the estimate, hence the number of samples, nonsense.
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            fn()
        end.record()
        torch.cuda.synchronize()
        return max(start.elapsed_time(end) / 3, 1e-3)

    def _as_graph(self, fn: Callable[[], object], calls: int) -> Callable[[], object]:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # first call outside capture: lazy allocations and module loads must not be captured
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        return graph.replay

    def time(self, fns: dict[str, Callable[[], object]], budget_ms: float = 2000.0, min_samples: int = 10,
             max_samples: int = 200, warmup_ms: float = 100.0, graph: bool = False, graph_calls: int = 20,
             on_sample: Callable[[int, int], None] | None = None,
             prepare: dict[str, Callable[[], object]] | None = None,
             audit: dict[str, Callable[[], object]] | None = None) -> dict[str, dict]:
        """Time each function of `fns`; returns {name: summarize(...)} in milliseconds per call. `prepare[name]`
        runs before each of that function's timed calls (untimed); `audit[name]` after the calls `audit_plan`
        picks (it raises to refuse what it saw)."""
        prepare, audit = prepare or {}, audit or {}
        per_call = {name: self._estimate_ms(fn) for name, fn in fns.items()}
        calls = {name: (graph_calls if graph else 1) for name in fns}
        runners = {name: (self._as_graph(fn, graph_calls) if graph else fn) for name, fn in fns.items()}
        for name, run in runners.items():  # warm-up
            for _ in range(max(1, min(100, int(warmup_ms / (per_call[name] * calls[name]))))):
                run()
        torch.cuda.synchronize()
        round_ms = sum(per_call[n] * calls[n] for n in fns) + 0.1 * len(fns)  # a flush costs ~0.06 ms on an H200
        samples = int(min(max_samples, max(min_samples, budget_ms / round_ms)))
        events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                         for _ in range(samples)] for name in fns}
        names = list(fns)
        checked = {name: audit_plan(samples) for name in audit}
        for i in range(samples):
            order = names[i % len(names):] + names[:i % len(names)]  # rotate who goes first
            for name in order:
                if name in prepare:
                    prepare[name]()
                self.flush()
                start, end = events[name][i]
                start.record()
                runners[name]()
                end.record()
                if i in checked.get(name, ()):
                    torch.cuda.synchronize()
                    audit[name]()
            if on_sample and i % 10 == 9:
                on_sample(i + 1, samples)
        torch.cuda.synchronize()
        return {name: {**summarize([s.elapsed_time(e) / calls[name] for s, e in events[name]]),
                       "graph_calls": calls[name] if graph else None}
                for name in fns}
