"""What a file says about its kernel's parameters, read from its text with `ast`, never run.

Two things are read:

- **The values the file gives** (`FileValues`): the arguments of its own calls of the kernel, followed as Python
  would run the file as a script: its top level and its `if __name__ == "__main__":` block in order (the README's
  quick start: `M = N = K = 1024`, `a = torch.randn((M, K))`, `c = matmul_relu(a, b)`), into the functions they
  call with the arguments given (`main(args.m, args.n)`, argparse's defaults standing for `args.m`), taking the
  branch an `if` takes where its test can be read (`if not tune:`); then `main()` and the file's other functions
  called with their own defaults (`def test_rms_norm(M=1024, ...)`); last, a constant of the script named like the
  parameter (`N, D = 4096, 8192`). A tensor passed for an eager kernel's tensor argument gives the sizes its
  annotation names (`A: T.Tensor((M, K), ...)` and `a = torch.randn(1024, 512)`: M=1024, K=512).
- **How the kernel uses each parameter** (`uses`): in a tensor's shape (`T.Tensor`, `T.Buffer`, `T.empty`), it is a
  problem size; as a divisor of `T.ceildiv` or of the grid, an extent of `T.alloc_shared`/`alloc_fragment`/
  `alloc_local`, `T.Pipelined`'s `num_stages`, `threads=`, or a `T.Parallel` extent, a tile value; as the test of
  an `if` (or of `T.if_then_else`, `x if p else y`), a switch. A tensor shape wins over a tile use (`N` in
  `T.alloc_fragment((block_M, N))` of a row kernel is still the row's length).

Nothing here imports the playground beyond the words; an expression it cannot read is simply not a value.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

UNKNOWN = object()
DEPTH = 6  # calls followed into the file's functions, at most this deep
STEPS = 20_000  # statements read in all: a file whose calls fan out (each function calling the next ten times) ends
DTYPE_WORDS = {"float16", "bfloat16", "float32", "float64", "half", "float", "int8", "uint8", "int16", "int32",
               "int64", "uint32", "bool", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz",
               "float8_e4m3fnuz"}
DTYPE_ALIASES = {"half": "float16", "float": "float32", "double": "float64"}
DTYPE_MODULES = {"T", "torch", "tl", "tilelang", "language"}
TENSOR_MAKERS = {"randn", "rand", "empty", "zeros", "ones", "full", "randint", "empty_strided", "tensor"}
SAME_SHAPE_METHODS = {"cuda", "half", "float", "bfloat16", "to", "contiguous", "requires_grad_", "cpu", "clone",
                      "detach", "normal_", "uniform_", "fill_", "zero_", "abs", "abs_", "exp", "sigmoid", "relu"}
ALLOCS_OF_TILES = {"alloc_shared", "alloc_fragment", "alloc_local", "alloc_var", "alloc_reducer", "alloc_tmem"}
SHAPE_CALLS = {"Tensor", "Buffer", "StridedTensor", "empty", "FlattenedTensor"}
TILE_KEYWORDS = {"threads", "num_stages", "num_threads", "stages"}


@dataclass(frozen=True)
class Shape:
    """A tensor the script makes (torch.randn(...) and the like): only its shape matters here."""
    dims: tuple


@dataclass
class Found:
    """One parameter's value from the file, and where the file gives it."""
    value: Any
    line: int
    where: str    # "main()", "the __main__ block", "the file's top level", "test_rms_norm()"
    how: str      # "call" (an argument of a call of the kernel) or "name" (a constant of the script so named)

    def describe(self, name: str) -> str:
        if self.how == "name":
            return f"{name} = {self.value!r} in {self.where}, line {self.line}"
        return f"the call of the kernel in {self.where}, line {self.line}"


@dataclass
class FileValues:
    """{parameter: Found} for one kernel of a file, and which of the file's kernels its own run calls first."""
    found: dict[str, Found] = field(default_factory=dict)
    first_called: str | None = None


# -- reading expressions -----------------------------------------------------------------------------------------
class Namespace(dict):
    """argparse's `args`: the defaults of the options added before `parse_args()`."""


def _dtype_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and node.attr in DTYPE_WORDS | set(DTYPE_ALIASES):
        base = node.value
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and base.id in DTYPE_MODULES:
            return DTYPE_ALIASES.get(node.attr, node.attr)
    return None


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return ""


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class Scope:
    """Names to values, a function's own over the module's."""

    def __init__(self, parent: "Scope | None" = None):
        self.values: dict[str, Any] = {}
        self.lines: dict[str, int] = {}
        self.parent = parent

    def get(self, name: str) -> Any:
        scope = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        return UNKNOWN

    def set(self, name: str, value: Any, line: int) -> None:
        self.values[name] = value
        self.lines[name] = line


def evaluate(node: ast.AST | None, scope: Scope) -> Any:
    """The value of an expression where it is made of constants, names of known values, arithmetic, tuples, dicts,
    dtypes and tensor constructors; UNKNOWN otherwise."""
    try:
        return _evaluate(node, scope)
    except Exception:  # (an overflow, a division by zero: not a value)
        return UNKNOWN


def _evaluate(node, scope: Scope) -> Any:
    if node is None:
        return UNKNOWN
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    dtype = _dtype_of(node)
    if dtype:
        return dtype
    if isinstance(node, ast.Attribute):
        base = _evaluate(node.value, scope)
        if isinstance(base, Namespace):
            return base.get(node.attr, UNKNOWN)
        if isinstance(base, Shape) and node.attr in ("T", "mT") and len(base.dims) == 2:
            return Shape(tuple(reversed(base.dims)))
        if isinstance(base, Shape) and node.attr == "shape":
            return tuple(base.dims)
        return UNKNOWN
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_evaluate(e, scope) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else list(items)
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                more = _evaluate(v, scope)
                if not isinstance(more, dict):
                    return UNKNOWN
                out.update(more)
                continue
            key = _evaluate(k, scope)
            if key is UNKNOWN:
                return UNKNOWN
            out[key] = _evaluate(v, scope)
        return out
    if isinstance(node, ast.Subscript):
        base, index = _evaluate(node.value, scope), _evaluate(node.slice, scope)
        if isinstance(base, (tuple, list, dict)) and index is not UNKNOWN and not isinstance(index, (slice, Shape)):
            return base[index]
        return UNKNOWN
    if isinstance(node, ast.UnaryOp):
        v = _evaluate(node.operand, scope)
        if v is UNKNOWN:
            return UNKNOWN
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.USub) and isinstance(v, (int, float)):
            return -v
        if isinstance(node.op, ast.UAdd) and isinstance(v, (int, float)):
            return v
        return UNKNOWN
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left, scope), _evaluate(node.right, scope)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
            return UNKNOWN
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b, ast.Div: lambda: a / b, ast.Mod: lambda: a % b,
               ast.Pow: lambda: a ** b if abs(b) < 64 else UNKNOWN, ast.LShift: lambda: a << b if b < 64 else UNKNOWN}
        op = ops.get(type(node.op))
        return op() if op else UNKNOWN
    if isinstance(node, ast.BoolOp):
        values = [_evaluate(v, scope) for v in node.values]
        if any(v is UNKNOWN for v in values):
            return UNKNOWN
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        a, b = _evaluate(node.left, scope), _evaluate(node.comparators[0], scope)
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN
        ops = {ast.Eq: lambda: a == b, ast.NotEq: lambda: a != b, ast.Lt: lambda: a < b, ast.LtE: lambda: a <= b,
               ast.Gt: lambda: a > b, ast.GtE: lambda: a >= b, ast.Is: lambda: a is b, ast.IsNot: lambda: a is not b}
        op = ops.get(type(node.ops[0]))
        return op() if op else UNKNOWN
    if isinstance(node, ast.IfExp):
        test = _evaluate(node.test, scope)
        return UNKNOWN if test is UNKNOWN else _evaluate(node.body if test else node.orelse, scope)
    if isinstance(node, ast.Call):
        return _evaluate_call(node, scope)
    return UNKNOWN


def _evaluate_call(node: ast.Call, scope: Scope) -> Any:
    name = _call_name(node)
    args = [_evaluate(a, scope) for a in node.args if not isinstance(a, ast.Starred)]
    kwargs = {k.arg: _evaluate(k.value, scope) for k in node.keywords if k.arg}
    if isinstance(node.func, ast.Name):
        if name in ("int", "float", "abs") and len(args) == 1 and isinstance(args[0], (int, float, str)):
            return {"int": int, "float": float, "abs": abs}[name](args[0])
        if name in ("min", "max") and args and all(isinstance(a, (int, float)) for a in args):
            return (min if name == "min" else max)(args)
        if name == "dict" and not args:
            return kwargs
        if name in ("tuple", "list") and len(args) == 1 and isinstance(args[0], (tuple, list)):
            return tuple(args[0]) if name == "tuple" else list(args[0])
        return UNKNOWN
    if not isinstance(node.func, ast.Attribute):
        return UNKNOWN
    owner = _base_name(node.func.value)
    if owner == "torch" and isinstance(node.func.value, ast.Name) and name in TENSOR_MAKERS:
        if name == "randint":
            size = kwargs.get("size", args[2] if len(args) > 2 else UNKNOWN)
            return Shape(tuple(size)) if isinstance(size, (tuple, list)) else UNKNOWN
        if name == "full":
            size = args[0] if args else kwargs.get("size", UNKNOWN)
            return Shape(tuple(size)) if isinstance(size, (tuple, list)) else UNKNOWN
        if name == "tensor":
            return UNKNOWN
        if len(args) == 1 and isinstance(args[0], (tuple, list)):
            return Shape(tuple(args[0]))
        if "size" in kwargs and isinstance(kwargs["size"], (tuple, list)):
            return Shape(tuple(kwargs["size"]))
        return Shape(tuple(args)) if args else UNKNOWN
    if name in SAME_SHAPE_METHODS:  # torch.randn(...).cuda().half()
        base = _evaluate(node.func.value, scope)
        return base if isinstance(base, Shape) else UNKNOWN
    if name in ("reshape", "view") and isinstance(_evaluate(node.func.value, scope), Shape):
        dims = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
        return Shape(tuple(dims))
    if name in ("parse_args", "parse_known_args"):
        return UNKNOWN  # (handled by the statement that assigns it: it needs the parser's options)
    return UNKNOWN


# -- following the file as a script ------------------------------------------------------------------------------
class Reader:
    """Runs the file's text in the mind: which of the `kernels` (names of the file's kernel functions) it calls,
    with which arguments, in the order a run of the script would meet them."""

    def __init__(self, tree: ast.Module, kernels: dict[str, list[str]]):
        self.tree = tree
        self.kernels = kernels        # {kernel name: its parameter names in signature order}
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.calls: list[tuple[str, dict[str, Any], int, str]] = []   # (kernel, bound arguments, line, where)
        self.reached: set[str] = set()
        self.module = Scope()
        self.parsers: dict[str, Namespace] = {}
        self.steps = 0

    def run_module(self) -> None:
        self.module.set("__name__", "__main__", 0)
        self.block(self.tree.body, self.module, [], "the file's top level")

    def run_function(self, name: str) -> None:
        fn = self.functions[name]
        scope = Scope(self.module)
        self.bind_defaults(fn, scope)
        self.block(fn.body, scope, [name], f"{name}()")

    def bind_defaults(self, fn: ast.FunctionDef, scope: Scope) -> None:
        a = fn.args
        positional = a.posonlyargs + a.args
        for arg, default in zip(positional[len(positional) - len(a.defaults):], a.defaults):
            scope.set(arg.arg, evaluate(default, self.module), default.lineno)
        for arg, default in zip(a.kwonlyargs, a.kw_defaults):
            if default is not None:
                scope.set(arg.arg, evaluate(default, self.module), default.lineno)

    # statements ------------------------------------------------------------------------------------------------
    def block(self, body: list[ast.stmt], scope: Scope, stack: list[str], where: str) -> bool:
        """Run the statements; True where a `return` (or `raise`) ended the block."""
        for stmt in body:
            if self.statement(stmt, scope, stack, where):
                return True
        return False

    def statement(self, stmt: ast.stmt, scope: Scope, stack: list[str], where: str) -> bool:
        self.steps += 1
        if self.steps > STEPS:
            return True
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            return False
        if isinstance(stmt, ast.If):
            test = evaluate(stmt.test, scope)
            main = _is_main_test(stmt.test)
            inner = "the __main__ block" if main and not stack else where
            if test is UNKNOWN:
                self.calls_in(stmt.test, scope, stack, where)
                ended = self.block(stmt.body, scope, stack, inner)
                return self.block(stmt.orelse, scope, stack, where) and ended
            return self.block(stmt.body if test else stmt.orelse, scope, stack, inner)
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            items = evaluate(stmt.iter, scope)
            self.calls_in(stmt.iter, scope, stack, where)
            first = items[0] if isinstance(items, (tuple, list)) and items else UNKNOWN
            if isinstance(stmt.iter, ast.Call) and _call_name(stmt.iter) == "range" and stmt.iter.args:
                start = evaluate(stmt.iter.args[0], scope) if len(stmt.iter.args) > 1 else 0
                first = start if isinstance(start, int) else UNKNOWN
            self.assign(stmt.target, first, scope, stmt.lineno)
            self.block(stmt.body, scope, stack, where)
            return False
        if isinstance(stmt, ast.While):
            self.block(stmt.body, scope, stack, where)
            return False
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self.calls_in(item.context_expr, scope, stack, where)
            return self.block(stmt.body, scope, stack, where)
        if isinstance(stmt, ast.Try):
            ended = self.block(stmt.body, scope, stack, where)
            self.block(stmt.finalbody, scope, stack, where)
            return ended
        if isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self.calls_in(stmt.value, scope, stack, where)
            return True
        if isinstance(stmt, ast.Raise):
            return True
        if isinstance(stmt, ast.Assign):
            self.calls_in(stmt.value, scope, stack, where)
            value = self.assigned_value(stmt.value, scope)
            for target in stmt.targets:
                self.assign(target, value, scope, stmt.lineno)
            return False
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.calls_in(stmt.value, scope, stack, where)
                self.assign(stmt.target, self.assigned_value(stmt.value, scope), scope, stmt.lineno)
            return False
        if isinstance(stmt, ast.AugAssign):
            self.calls_in(stmt.value, scope, stack, where)
            if isinstance(stmt.target, ast.Name):
                value = evaluate(ast.BinOp(ast.Name(stmt.target.id, ast.Load()), stmt.op, stmt.value), scope)
                scope.set(stmt.target.id, value, stmt.lineno)
            return False
        if isinstance(stmt, ast.Expr):
            self.parser_option(stmt.value, scope)
            self.calls_in(stmt.value, scope, stack, where)
        return False

    def assigned_value(self, node: ast.AST, scope: Scope) -> Any:
        if isinstance(node, ast.Call) and _call_name(node) in ("parse_args", "parse_known_args"):
            parser = _base_name(node.func)
            options = Namespace(self.parsers.get(parser, {}))
            return (options, UNKNOWN) if _call_name(node) == "parse_known_args" else options
        if isinstance(node, ast.Call) and _call_name(node) == "ArgumentParser":
            return Namespace()  # (a parser; its options are kept by name in self.parsers)
        return evaluate(node, scope)

    def assign(self, target: ast.AST, value: Any, scope: Scope, line: int) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, Namespace) and not value and target.id not in self.parsers:
                self.parsers[target.id] = Namespace()
            scope.set(target.id, value, line)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value if isinstance(value, (tuple, list)) and len(value) == len(target.elts) else None
            for i, t in enumerate(target.elts):
                self.assign(t, values[i] if values is not None else UNKNOWN, scope, line)

    def parser_option(self, node: ast.AST, scope: Scope) -> None:
        """`parser.add_argument("--kv_seqlen", type=int, default=8192)`: args.kv_seqlen is 8192."""
        if not (isinstance(node, ast.Call) and _call_name(node) == "add_argument"):
            return
        parser = _base_name(node.func)
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        dest = evaluate(kwargs["dest"], scope) if "dest" in kwargs else None
        if not isinstance(dest, str):
            long = [f for f in flags if f.startswith("--")] or [f for f in flags if not f.startswith("-")] or flags
            if not long:
                return
            dest = long[0].lstrip("-").replace("-", "_")
        action = evaluate(kwargs.get("action"), scope) if "action" in kwargs else None
        if "default" in kwargs:
            value = evaluate(kwargs["default"], scope)
        elif action == "store_true":
            value = False
        elif action == "store_false":
            value = True
        else:
            value = None
        self.parsers.setdefault(parser, Namespace())[dest] = value

    # calls -----------------------------------------------------------------------------------------------------
    def calls_in(self, node: ast.AST, scope: Scope, stack: list[str], where: str) -> None:
        """Every call in the expression, innermost first (`tilelang.compile(k(...))`), in the order Python makes
        them: a kernel's is recorded, a function of the file's is followed."""
        for call in _calls(node):
            self.call(call, scope, stack, where)

    def call(self, node: ast.Call, scope: Scope, stack: list[str], where: str) -> None:
        f = node.func
        kernel = None
        if isinstance(f, ast.Name) and f.id in self.kernels:
            kernel = f.id
        elif isinstance(f, ast.Attribute) and f.attr in ("compile", "get_tir", "lower") and \
                isinstance(f.value, ast.Name) and f.value.id in self.kernels:
            kernel = f.value.id
        if kernel is not None:
            self.calls.append((kernel, self.bind(self.kernels[kernel], node, scope), node.lineno, where))
            return
        if isinstance(f, ast.Name) and f.id in self.functions and f.id not in stack and len(stack) < DEPTH:
            fn = self.functions[f.id]
            inner = Scope(self.module)
            self.bind_defaults(fn, inner)
            names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
            for value, name in zip(self.arguments(node, scope)[0], names):
                inner.set(name, value, node.lineno)
            for name, value in self.arguments(node, scope)[1].items():
                inner.set(name, value, node.lineno)
            self.reached.add(f.id)
            self.block(fn.body, inner, stack + [f.id], f"{f.id}()")

    def arguments(self, node: ast.Call, scope: Scope) -> tuple[list, dict]:
        positional, keywords = [], {}
        for a in node.args:
            if isinstance(a, ast.Starred):
                more = evaluate(a.value, scope)
                if not isinstance(more, (tuple, list)):
                    break  # the positions after it are not known
                positional += list(more)
            else:
                positional.append(evaluate(a, scope))
        for k in node.keywords:
            if k.arg is None:
                more = evaluate(k.value, scope)
                if isinstance(more, dict):
                    keywords.update({str(n): v for n, v in more.items()})
            else:
                keywords[k.arg] = evaluate(k.value, scope)
        return positional, keywords

    def bind(self, params: list[str], node: ast.Call, scope: Scope) -> dict[str, Any]:
        positional, keywords = self.arguments(node, scope)
        bound = dict(zip(params, positional))
        bound.update(keywords)
        return {k: v for k, v in bound.items() if v is not UNKNOWN}


def _calls(node: ast.AST) -> list[ast.Call]:
    """The calls in an expression, arguments before the call that takes them; lambdas and comprehensions are not
    entered (they may never run)."""
    out: list[ast.Call] = []

    def visit(n: ast.AST) -> None:
        if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        for child in ast.iter_child_nodes(n):
            visit(child)
        if isinstance(n, ast.Call):
            out.append(n)
    visit(node)
    return out


def _is_main_test(node: ast.AST) -> bool:
    return (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "__name__"
            and len(node.comparators) == 1 and isinstance(node.comparators[0], ast.Constant)
            and node.comparators[0].value == "__main__")


# -- the kernel's own function -----------------------------------------------------------------------------------
def function_node(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """The module-level `def name` the module's name is bound to (the last one)."""
    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node
    return found


def tensor_annotations(fn: ast.FunctionDef) -> dict[str, list[ast.AST]]:
    """An eager kernel's tensor arguments and the shape each one's annotation gives (`A: T.Tensor((M, K), ...)`)."""
    out: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            shape = _shape_of_annotation(node.annotation)
            if shape is not None:
                out.setdefault(node.target.id, shape)
    return out


def _shape_of_annotation(node: ast.AST) -> list[ast.AST] | None:
    if isinstance(node, ast.Call) and _call_name(node) in SHAPE_CALLS and node.args:
        shape = node.args[0]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr in SHAPE_CALLS:
        shape = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) and node.slice.elts else node.slice
    else:
        return None
    return list(shape.elts) if isinstance(shape, (ast.Tuple, ast.List)) else None


def sizes_from_tensors(fn: ast.FunctionDef, bound: dict[str, Any]) -> dict[str, Any]:
    """The sizes a call's tensors give: for each tensor argument bound to a Shape, each plain name of its
    annotation's shape at that dimension."""
    out: dict[str, Any] = {}
    for arg, dims in tensor_annotations(fn).items():
        shape = bound.get(arg)
        if not isinstance(shape, Shape) or len(shape.dims) != len(dims):
            continue
        for dim, value in zip(dims, shape.dims):
            if isinstance(dim, ast.Name) and isinstance(value, int) and not isinstance(value, bool):
                out.setdefault(dim.id, value)
    return out


def file_values(source: str, kernels: dict[str, list[str]], entry: str) -> FileValues:
    """The values the file gives the kernel `entry`'s parameters (`kernels`: every kernel of the file and its
    argument names, in order), each with where it is given; and the kernel the file's own run calls first. A file
    this reading cannot follow gives no values (never an error: they are a convenience)."""
    try:
        return _file_values(source, kernels, entry)
    except (SyntaxError, RecursionError, MemoryError, ValueError, TypeError, AttributeError, IndexError, KeyError):
        return FileValues()


def _file_values(source: str, kernels: dict[str, list[str]], entry: str) -> FileValues:
    tree = ast.parse(source)
    reader = Reader(tree, kernels)
    reader.run_module()
    script = list(reader.calls)
    first_called = script[0][0] if script else None
    ordered = ["main"] + [n for n in reader.functions if n != "main"]
    for name in ordered:
        if name in reader.functions and name not in reader.reached and name not in kernels:
            reader.run_function(name)
    fn = function_node(tree, entry)
    found: dict[str, Found] = {}
    for kernel, bound, line, where in reader.calls:
        if kernel != entry:
            continue
        values = dict(bound)
        if fn is not None:
            for name, value in sizes_from_tensors(fn, bound).items():
                values.setdefault(name, value)
        for name, value in values.items():
            if name not in found and _plain(value):
                found[name] = Found(value, line, where, "call")
    # a constant of the script (its top level, its __main__ block) named like the parameter
    for name, value in reader.module.values.items():
        if name not in found and _plain(value) and name != "__name__":
            line = reader.module.lines.get(name, 0)
            found[name] = Found(value, line, "the __main__ block" if _in_main_block(tree, line) else
                                "the file's top level", "name")
    return FileValues(found, first_called)


def _plain(value: Any) -> bool:
    return value is not None and isinstance(value, (bool, int, float, str)) and value is not UNKNOWN


def _in_main_block(tree: ast.Module, line: int) -> bool:
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_test(node.test):
            return node.lineno <= line <= (node.end_lineno or node.lineno)
    return False


# -- how the kernel uses each parameter ---------------------------------------------------------------------------
def uses(fn: ast.FunctionDef | None, names: list[str]) -> dict[str, str]:
    """{parameter: "problem" | "tile" | "switch"} for each of `names` the function's body uses in one of those
    ways (module docstring); a name used in a tensor's shape is a problem size whatever else it is used for."""
    try:
        return _uses(fn, names)
    except (RecursionError, ValueError, TypeError, AttributeError, IndexError):
        return {}


def _uses(fn: ast.FunctionDef | None, names: list[str]) -> dict[str, str]:
    if fn is None:
        return {}
    wanted = set(names)
    # local names made from the parameters (`shape_q = [batch, heads, dim]`, `valid_block_H = min(block_H, g)`)
    made: dict[str, set[str]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            sources = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            for target in node.targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                        made.setdefault(t.id, set()).update(sources)

    def params_in(node: ast.AST | None) -> set[str]:
        if node is None:
            return set()
        seen, todo, out = set(), [n.id for n in ast.walk(node) if isinstance(n, ast.Name)], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in wanted:
                out.add(name)
            todo += list(made.get(name, ()))
        return out

    problem: set[str] = set()
    tile: set[str] = set()
    switch: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.arg) and node.annotation is not None:
            shape = _shape_node(node.annotation)
            problem |= params_in(shape)
        elif isinstance(node, ast.AnnAssign):
            problem |= params_in(_shape_node(node.annotation))
        elif isinstance(node, ast.Call):
            call = _call_name(node)
            owner = _base_name(node.func) if isinstance(node.func, ast.Attribute) else None
            if call in ("empty",) and owner == "T" and node.args:
                problem |= params_in(node.args[0])
            elif call in ALLOCS_OF_TILES and node.args:
                tile |= params_in(node.args[0])
            elif call == "ceildiv" and len(node.args) == 2:
                tile |= params_in(node.args[1])
            elif call == "Kernel":
                for a in node.args:
                    if isinstance(a, ast.BinOp) and isinstance(a.op, (ast.FloorDiv, ast.Div)):
                        tile |= params_in(a.right)
            elif call == "Parallel":
                for a in node.args:
                    tile |= params_in(a)
            elif call == "if_then_else" and node.args:
                switch |= {n.id for n in ast.walk(node.args[0]) if isinstance(n, ast.Name) and n.id in wanted
                           and _is_plain_test(node.args[0])}
            for k in node.keywords:
                if k.arg in TILE_KEYWORDS:
                    tile |= params_in(k.value)
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)) and _is_plain_test(node.test):
            switch |= {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name) and n.id in wanted}
    out = {n: "switch" for n in switch}
    out.update({n: "tile" for n in tile})
    out.update({n: "problem" for n in problem})
    return out


def _shape_node(annotation: ast.AST) -> ast.AST | None:
    if isinstance(annotation, ast.Call) and _call_name(annotation) in SHAPE_CALLS and annotation.args:
        return annotation.args[0]
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Attribute) and \
            annotation.value.attr in SHAPE_CALLS:
        return annotation.slice.elts[0] if isinstance(annotation.slice, ast.Tuple) and annotation.slice.elts \
            else annotation.slice
    return None


def _is_plain_test(test: ast.AST) -> bool:
    """`if causal:`, `if not causal:`, `if a and b:`: a name tested for truth (not `if n > 64:`)."""
    if isinstance(test, ast.Name):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _is_plain_test(test.operand)
    if isinstance(test, ast.BoolOp):
        return all(_is_plain_test(v) for v in test.values)
    return False
