"""The engine: a pure library (no UI, no processes of its own beyond parallel compiles).

source → kernel (the kernel model: a file, its declarations, a resolved Config) → compile (CUDA, PTX, SASS,
resources, line map) → verify / timing (on the GPU) → run, tune, sweep and bench (plans over one measurement).
actions.execute is the one entry the command line and the job worker call; `errors.StageError` is the one shape
every failure takes.
"""
