"""The exercise's reference, inputs and baseline: the shipped softmax's own (kernels/softmax.py)."""
from kernels.softmax import BASELINES, bytes_moved, flops, make_inputs, reference  # noqa: F401
