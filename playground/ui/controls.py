"""A kernel's own declarations (catalogue `describe()`) → the page's controls, and the controls' values → params.

Pure functions over the describe() dict. Every control is a dropdown whose values are strings (the URL, a typed-in
custom value and a chosen one all arrive as text; the engine converts them by the type of the factory's default).

Every tile parameter and option starts at AUTO_TILE: the page leaves it out of the request, so the engine picks it for
the problem asked (playground/engine/config_choice.py: the preset's tuned config, the nearest tuned one, the kernel
file's rule, or the factory default). A student changes the sizes first; the tile must follow them unless set.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

PROBLEM_SLOTS = 8   # dropdowns kept ready for problem sizes (gemm uses 3, attention 4 and a switch)
TILE_SLOTS = 12     # dropdowns kept ready for tile parameters and options
CUSTOM = "custom"
AUTO_TILE = "auto"  # a tile control's first choice and default: left out of the request, the engine picks it
IGNORED_QUERY = ("kernel", "preset", "arch", "__theme", "view")  # handled elsewhere, or Gradio's own


@dataclass
class Control:
    name: str
    group: str                      # "problem", "tile" or "option"
    choices: list[str]
    default: str
    info: str = ""
    custom: bool = True             # may the user type a value outside the choices?
    space: list[str] = field(default_factory=list)   # the values the autotuner tries (empty: not tuned)
    factory: str = ""               # the kernel factory's own default (a tile control's `default` is AUTO_TILE)

    @property
    def auto(self) -> bool:
        """Whether this control may be left to the engine (a tile parameter or option with a factory default)."""
        return self.default == AUTO_TILE


@dataclass
class Controls:
    kernel: str
    problem: list[Control] = field(default_factory=list)
    tile: list[Control] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    dtype: str = ""
    presets: dict[str, dict] = field(default_factory=dict)
    tuned: dict[str, dict] = field(default_factory=dict)   # {preset label: tile parameters tuned for that size}

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.problem + self.tile]

    def defaults(self) -> dict[str, str]:
        """What the controls start at: the problem's default sizes, AUTO_TILE for the tile, the dtype."""
        return {c.name: c.default for c in self.problem + self.tile} | {"dtype": self.dtype}

    def factory_defaults(self) -> dict[str, str]:
        """The kernel factory's own defaults (tile values included, as text): what labels compare a config with."""
        return {c.name: c.factory or c.default for c in self.problem + self.tile} | {"dtype": self.dtype}


def from_draft_before_auto(controls: Controls, values: dict) -> dict:
    """A draft saved before the tile controls had "auto" holds every tile value, the untouched ones at the factory's
    defaults: those become "auto" again (a value set by hand differs from the factory's and stays)."""
    out = dict(values)
    for c in controls.tile:
        if c.auto and c.factory and c.name in out and text(out[c.name]) == text(c.factory):
            out[c.name] = c.default
    return out


def text(value) -> str:
    return str(value)


def _choices(values, default) -> list[str]:
    out = []
    for v in list(values) + [default]:
        s = text(v)
        if s not in out:
            out.append(s)
    return out


def controls_for(describe: dict) -> Controls:
    """The controls of one kernel: problem sizes (values from its presets), tile parameters (from its space),
    options (from OPTIONS), the dtype and the presets."""
    defaults = describe.get("defaults") or {}
    problem_names = list(describe.get("problem") or [])
    presets = describe.get("presets") or {}
    space = describe.get("space") or {}
    options = describe.get("options") or {}
    problem = []
    for name in problem_names:
        default = defaults.get(name, next((p[name] for p in presets.values() if name in p), ""))
        if isinstance(default, bool):
            values, custom = [True, False], False
        else:
            values = sorted({p[name] for p in presets.values() if name in p}, key=lambda v: (str(type(v)), v))
            custom = True
        problem.append(Control(name, "problem", _choices(values, default), text(default),
                               "problem size" if not isinstance(default, bool) else "switch", custom))
    tile = []
    for name, default in defaults.items():
        if name in problem_names or name == "dtype":
            continue
        if name in options:
            tile.append(Control(name, "option", _choices([AUTO_TILE, *options[name]], default), AUTO_TILE, "option",
                                False, factory=text(default)))
        elif name in space:
            tile.append(Control(name, "tile", _choices([AUTO_TILE, *space[name]], default), AUTO_TILE, "tuned", True,
                                [text(v) for v in space[name]], factory=text(default)))
        else:
            values = [True, False] if isinstance(default, bool) else [default]
            tile.append(Control(name, "tile", _choices([AUTO_TILE, *values], default), AUTO_TILE, "",
                                not isinstance(default, bool), factory=text(default)))
    dtypes = [text(d) for d in describe.get("dtypes") or []]
    dtype = text(defaults.get("dtype", dtypes[0] if dtypes else ""))
    return Controls(describe.get("name", ""), problem, tile, dtypes, dtype, presets, describe.get("tuned") or {})


def preset_values(controls: Controls, label: str) -> dict[str, str]:
    """What choosing a preset sets: its sizes, and every tile control to AUTO_TILE, so the engine picks the tile for
    the new size (the preset's tuned config where it has one: picked_by "preset"; leaving a tuned size leaves its
    tuning). A tile value typed in afterwards is sent as the user's."""
    out = {k: text(v) for k, v in controls.presets.get(label, {}).items()}
    out.update({c.name: AUTO_TILE for c in controls.tile if c.auto})
    return out


def preset_for(controls: Controls, values: dict) -> str:
    """The label of the preset whose sizes the values match, or "custom"."""
    for label, sizes in controls.presets.items():
        if all(text(values.get(k)) == text(v) for k, v in sizes.items()):
            return label
    return CUSTOM


def values_from_slots(controls: Controls, problem_values: list, tile_values: list) -> dict[str, str]:
    """{name: value} from the dropdown slots (slots past the kernel's parameters are ignored)."""
    out = {}
    for group, slots in ((controls.problem, list(problem_values)), (controls.tile, list(tile_values))):
        for i, c in enumerate(group):
            v = slots[i] if i < len(slots) else None
            out[c.name] = c.default if v is None or v == "" else text(v)
    return out


def engine_params(values: dict, dtype: str | None) -> dict:
    """What run_job gets: every parameter the user set (the engine converts the strings), and the dtype. A tile
    value AUTO_TILE is left out: the engine picks it for the problem (and says so in the answer's `config`)."""
    params = {k: v for k, v in values.items() if v is not None and v != "" and v != AUTO_TILE}
    if dtype:
        params["dtype"] = dtype
    return params


def from_query(controls: Controls, query: dict, base: dict | None = None) -> tuple[dict, list[str]]:
    """Parameter values (and "dtype") from a URL's query (?kernel=gemm&block_M=128&preset=2048³&dtype=bfloat16),
    over `base` (else the defaults); also the names it did not know (to say so)."""
    values = controls.defaults()
    values.update({k: text(v) for k, v in (base or {}).items() if k in values})
    unknown = []
    preset = query.get("preset")
    if preset is not None:
        if preset in controls.presets:
            values.update(preset_values(controls, preset))
        else:
            unknown.append(f"preset={preset}")
    for k, v in query.items():
        if k in IGNORED_QUERY:
            continue
        if k in values:
            values[k] = text(v)
        else:
            unknown.append(k)
    return values, unknown


def apply_tile(controls: Controls, values: dict, tile: dict) -> dict:
    """Values with the tile parameters of `tile` (e.g. the autotuner's best) set."""
    out = dict(values)
    for k, v in (tile or {}).items():
        if k in controls.names:
            out[k] = text(v)
    return out


def config_of(controls: Controls, values: dict, dtype: str) -> dict:
    """The values in the engine's config shape ({"problem", "dtype", "tile"}), for labels where the engine answered
    with no config of its own (a source that does not import): the tile values the user set, none left to AUTO_TILE
    (what the engine would have picked is not known)."""
    return {"problem": {c.name: values.get(c.name) for c in controls.problem}, "dtype": dtype,
            "tile": {c.name: values.get(c.name) for c in controls.tile if values.get(c.name) != AUTO_TILE}}


PLAIN_VALUE = re.compile(r"[\w.+-]{1,40}")


def auto_picks(controls: Controls, values: dict, config: dict | None) -> dict[str, str]:
    """{name: value} for each control left at AUTO_TILE, as the engine picked it for the request whose answer's
    config this is (its `tile`): what "auto" became."""
    tile = (config if isinstance(config, dict) else {}).get("tile")
    tile = tile if isinstance(tile, dict) else {}
    # (a value shown only where it looks like one: the answer comes from a job that ran the user's file, and the
    # dropdown's `info` is Markdown to Gradio, where a forged "[x](url)" would be a link in a classmate's page)
    return {c.name: text(tile[c.name]) for c in controls.tile
            if c.auto and text(values.get(c.name, c.default)) == AUTO_TILE and c.name in tile
            and PLAIN_VALUE.fullmatch(text(tile[c.name]))}


# -- what each parameter does ------------------------------------------------------------------------------------
# A tooltip per parameter name: what it does and what it trades (its range is added from the kernel's own choices).
# Names mean the same in every shipped kernel unless a (kernel, name) entry says otherwise.
HELP = {
    "M": "rows of the output (and of A)",
    "N": "columns of the output (and of B)",
    "K": "the reduction length: columns of A, rows of B",
    ("vector_add", "N"): "elements in each vector",
    ("softmax", "M"): "rows: one softmax each",
    ("softmax", "N"): "row length: the softmax runs along it",
    "batch": "independent sequences",
    "heads": "attention heads per sequence",
    "seq_len": "tokens per sequence (queries and keys)",
    "dim": "head dimension: the length of each query, key and value vector",
    "causal": "each query sees only the keys before it (tiles above the diagonal are skipped)",
    "group_size": "query heads that share one key/value head (grouped-query attention: Llama 3 has 32 query heads "
                  "on 8 key/value heads, groups of 4); 1 is multi-head attention",
    "block_M": "rows of the output tile one block computes: bigger reuses each load more but needs more shared "
               "memory and registers, and makes fewer blocks",
    "block_N": "columns of the output tile one block computes: bigger reuses each load more but needs more "
               "shared memory and registers, and makes fewer blocks",
    ("vector_add", "block_N"): "elements one block adds: bigger means fewer, longer-lived blocks",
    ("flash_attention", "block_N"): "keys per inner step: bigger means fewer steps but a larger S tile in "
                                    "registers",
    ("flash_attention", "block_M"): "queries one block handles: bigger reuses each K and V tile more but needs "
                                    "more registers and makes fewer blocks",
    "block_K": "depth of each step along K: bigger means fewer steps and waits, more shared memory per stage",
    "num_stages": "tiles in flight at once (the pipeline's depth): more hides memory latency, each stage costs "
                  "its tiles' shared memory",
    "threads": "threads per block: more threads hide latency; fewer leave more registers to each",
    "swizzle_panel": "tile columns walked together so neighbouring blocks share tiles in L2 (0: row by row)",
    "warp_specialized": "Hopper's hand-written pipeline: a producer warpgroup issues TMA loads, the consumers "
                        "only multiply (False: TileLang's T.Pipelined)",
    "num_sms": "blocks of the persistent schedule: one per SM of the GPU (the engine reads the count)",
    "split_k": "CTAs of a thread block cluster that share each output tile, each multiplying a part of K; they add "
               "the parts through distributed shared memory (for outputs of too few tiles to fill the SMs)",
    "multicast": "two CTAs of a thread block cluster, in neighbouring tile rows of one tile column: each step of B "
                 "is loaded once for both (TMA multicast), halving B's reads from L2",
    "activation": "the function applied to each output element before the store",
    "rows_per_block": "rows one block normalises: more amortise the launch, fewer make more blocks",
    "cluster": "CTAs one row is split over (a thread block cluster, sm_90+): long rows fit on chip",
    "overlap": "the softmax of one tile runs while the tensor cores multiply the next (async wgmma)",
    "pingpong": "two consumer warpgroups take turns on the tensor cores",
    "extra_step": "one step more than there are tiles, so the last P V goes through the pipeline too",
    "fence_wait": "a fence keeps ptxas from moving the wgmma wait before the exponentials",
    "two_p": "two P buffers, so P(k) is written while P V still reads P(k-1)",
    "lazy_rescale": "rescale O only where a row's max grew by more than 8 (log2 units)",
    "persistent": "one block per SM walks many query blocks (head dim 128; causal in rounds that snake)",
}


def help_text(kernel: str, control: Control) -> str:
    """The tooltip of a control: what it does and what it trades, then its range."""
    what = HELP.get((kernel, control.name)) or HELP.get(control.name) or ""
    if control.space:
        where = "the autotuner tries " + ", ".join(control.space)
    elif control.group == "problem" and control.custom:
        where = "any size; the presets use " + ", ".join(control.choices)
    elif not control.custom:
        where = "one of " + ", ".join(c for c in control.choices if not (control.auto and c == AUTO_TILE))
    else:
        where = f"default {control.factory or control.default}"
    if control.auto:
        where += f"; {AUTO_TILE}: the engine picks it for the problem"
    return f"{control.name}: {what}. {where[:1].upper() + where[1:]}." if what else f"{control.name}: {where}."


def outside_space(controls: Controls, values: dict) -> dict[str, str]:
    """{name: why} for each value the kernel does not offer: a tile value outside the autotuner's space, or a
    switch or option set to something that is not one of its choices. AUTO_TILE is always offered."""
    out = {}
    for c in controls.problem + controls.tile:
        v = text(values.get(c.name, c.default))
        if c.auto and v == AUTO_TILE:
            continue
        whole = re.fullmatch(r"-?\d+", text(c.factory or c.default))  # a size or a tile count, not a switch
        if whole and v == "":
            out[c.name] = f"empty: {c.factory or c.default} is used"
        elif whole and not re.fullmatch(r"-?\d+", v):
            out[c.name] = f"{v} is not a whole number: the compile will refuse it"
        elif whole and int(v) < (1 if c.group == "problem" else 0):
            out[c.name] = f"{v} is {'not positive' if c.group == 'problem' else 'negative'}: the compile will refuse it"
        elif c.space and v not in c.space:
            out[c.name] = f"{v} is outside the tuned space ({', '.join(c.space)}); it may still compile"
        elif not c.custom and v not in c.choices:
            out[c.name] = f"{v} is not one of {', '.join(c.choices)}"
    return out


def named_in(controls: Controls, message: str) -> list[str]:
    """The controls a message names (e.g. a resource error's "block_K=256, num_stages=4"), in the page's order."""
    return [n for n in controls.names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", message or "")]


def changed(controls: Controls, values: dict, dtype: str | None = None) -> dict[str, str]:
    """The values that differ from the controls' defaults ({name: value}, dtype included), in the page's order: the
    sizes changed and the tile values set (AUTO_TILE is a tile control's default)."""
    defaults = controls.defaults()
    out = {n: text(values[n]) for n in controls.names if n in values and text(values[n]) != defaults.get(n)}
    if dtype and dtype != controls.dtype:
        out["dtype"] = dtype
    return out
