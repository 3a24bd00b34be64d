"""The kernel model: what a kernel is to the engine, from a file to a resolved Config.

Its modules import one way, each only those above it in this list:

    words.py         the shared words: where the kernels live, Config, call_with, problem_label
    params.py        a parameter's kind and the one converter of a request's values (its messages)
    buffers.py       a prim_func's buffers: shapes at a problem's sizes, bytes, inputs made from them
    contract.py      the catalogue's contract (what a shipped kernel file declares) and its Kernel
    declarations.py  checks of what a file declares: the whole contract, or names that fit its kernel
    inferred.py      any TileLang file as a kernel: its entries, parameters and the rest inferred (UserKernel)
    loader.py        the catalogue's names, and a name, a path or source text → a Kernel: the one place that
                     decides which kind a file is
"""
from .buffers import buffer_bytes, buffers_of, concrete, static_shape
from .contract import REQUIRED, Kernel
from .inferred import ENTRY_KEYS, Entry, UserKernel, entry_from
from .loader import builtin_names, builtin_path, builtin_source, is_path, load, load_file, load_user_file
from .params import Param, convert
from .words import KERNELS_DIR, ROOT, Config, call_with, problem_label

__all__ = ["Config", "Kernel", "UserKernel", "Entry", "Param", "REQUIRED", "ENTRY_KEYS", "ROOT", "KERNELS_DIR",
           "load", "load_file", "load_user_file", "is_path", "builtin_names", "builtin_path", "builtin_source",
           "entry_from", "call_with", "convert", "problem_label", "buffers_of", "buffer_bytes", "concrete",
           "static_shape"]
