"""Derive, from the installed SGLang's source, how each architecture it serves loads FP8 KV-cache scales.

    python hack/gen_kv_scale_paths.py           # rewrites the two outputs below
    python hack/gen_kv_scale_paths.py --check   # exit 1 when they differ from what SGLang's source says

Outputs: contracts/src/kvant_contracts/kv_scale_paths.py (the table calibration reads) and
docs/kv-scale-paths.md (the same table for people). Nothing of SGLang is imported (most model modules
need CUDA packages); its files are parsed with `ast`. Per architecture (each class named by an
`EntryClass` of a module directly under sglang/srt/models/, as SGLang's registry finds them):

- remap: the loader calls `maybe_remap_kv_scale_name`, so compressed-tensors names
  `model.layers.N.self_attn.k_scale` load, into the RadixAttention `self_attn.attn`. Such a loader
  also turns an exact name `...self_attn.attn.k_scale` into `...attn.attn.k_scale`, which is no
  parameter, and drops it: remap loaders never take exact names.
- exact: the loader looks checkpoint names up in its parameter dict (`params_dict[name]`,
  `name in params_dict`, or SGLang's AutoWeightsLoader) and does not remap scale names, so the
  parameters that the KV-cache quant method registers on the RadixAttention
  (`model.layers.N.<attention>.k_scale`, `.v_scale`) load under their own names.
- json: the class defines or inherits `load_kv_cache_scales`, which SGLang calls with
  `--quantization-param-path`.
- cache: `mla` when the attention caches DeepSeek's latent row through `attn_mqa`; `gqa` when one
  RadixAttention `attn` per decoder layer holds K and V and no layer is a state-space or
  linear-attention mixer; `hybrid` when such mixers are reachable; `other` when no RadixAttention is.
- attention: the decoder layer's attribute and the RadixAttention's attribute (`self_attn.attn`),
  when exactly one pair is found and the decoder layers sit at `model.layers` (the class assigns
  `self.model`, and a class it reaches assigns `self.layers`); empty when that is unknown or ambiguous.

How the loader is followed: `load_weights` is looked up along the class's bases within SGLang's
source (a C3 order over every base that resolves to a SGLang class, any depth); calls are followed
through `self.method()`, `super().method()`, `Class.method(self)`, module functions (also imported
ones) and `self.<attr>.method()` where `__init__` assigns `self.<attr> = SomeClass(...)`. Branches
under `if envs.SGLANG_ENABLE_WEIGHT_LOADER_V2...` are skipped: that loader is off by default.

Limits: the analysis reads call structure, not values. It does not know whether a renaming on the
way (a stacked-parameter mapping, a prefix filter) changes a scale name before the lookup, nor
whether a remap call's result is used to load the tensor; the layer path is checked as far as
`self.model` and `self.layers` being assigned, not that one holds the other; attributes assigned through
`setattr`, factories or dynamic class choice are not followed, nor are methods called on local
variables. tests/unit/test_calibrate_paths_drive_sglang_loaders.py checks the architectures Kvant
calibrates against SGLang's own functions.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE_MODULE = ROOT / "contracts/src/kvant_contracts/kv_scale_paths.py"
TABLE_DOC = ROOT / "docs/kv-scale-paths.md"
GENERATOR = "hack/gen_kv_scale_paths.py"
_REMAP = "maybe_remap_kv_scale_name"
_RADIX = "sglang.srt.layers.radix_attention.RadixAttention"
_AUTO_LOADER = "AutoWeightsLoader"
_MODELS = "sglang.srt.models."
_PARSED = (_MODELS, "sglang.srt.model_loader.")  # what model classes and their loaders are made of
_V2_SWITCH = "SGLANG_ENABLE_WEIGHT_LOADER_V2"
_MIXERS = re.compile(r"Mamba|RadixLinearAttention|LinearAttention|GatedDeltaNet|Lightning|ShortConv|SSM")
_PARAMETER_DICT = re.compile(r"(self\.)?params?(_dict)?")


@dataclass(frozen=True)
class Paths:
    remap: bool
    exact: bool
    json: bool
    cache: str
    attention: str
    module: str


@dataclass
class Module:
    name: str
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)  # top-level `NAME = expression`
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target


ClassKey = tuple[str, str]  # (module, class name)
Named = tuple[str, Module, str]  # ("class" | "function" | "module", defining module, name)


class Source:
    """SGLang's model and loader modules, parsed on demand by dotted name."""

    def __init__(self, package: Path) -> None:
        self.package = package  # the folder of `sglang`
        self._modules: dict[str, Module | None] = {}

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            self._modules[name] = self._parse(name) if name.startswith(_PARSED) else None
        return self._modules[name]

    def _parse(self, name: str) -> Module | None:
        base = self.package.parent / name.replace(".", "/")
        path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not path.is_file():
            return None
        tree = ast.parse(path.read_text(), str(path))
        module = Module(name)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                module.classes[node.name] = node
            elif isinstance(node, ast.FunctionDef):
                module.functions[node.name] = node
            elif isinstance(node, ast.Assign) and isinstance(target := node.targets[0], ast.Name):
                module.aliases[target.id] = node.value
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for item in ast.walk(tree):  # imports inside functions count too (loaders import lazily)
            if isinstance(item, ast.ImportFrom):
                origin = _absolute(package, item.module or "", item.level)
                module.imports.update({a.asname or a.name: f"{origin}.{a.name}" for a in item.names})
            elif isinstance(item, ast.Import):
                module.imports.update({a.asname or a.name.partition(".")[0]: a.name for a in item.names})
        return module

    def resolve(self, module: Module, expr: ast.AST, depth: int = 0) -> Named | None:
        """What `expr` names in `module`, followed through aliases and imports."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Name):
            return self._resolve_name(module, expr.id, depth)
        if isinstance(expr, ast.Attribute):
            owner = self.resolve(module, expr.value, depth + 1)
            if owner and owner[0] == "module":
                return self._resolve_name(owner[1], expr.attr, depth + 1)
        return None

    def _resolve_name(self, module: Module, name: str, depth: int) -> Named | None:
        for kind, names in (("class", module.classes), ("function", module.functions)):
            if name in names:
                return (kind, module, name)
        if name in module.aliases:
            return self.resolve(module, module.aliases[name], depth + 1)
        target = module.imports.get(name, "")
        if (imported := self.module(target)) is not None:
            return ("module", imported, "")
        origin, _, attribute = target.rpartition(".")
        owner = self.module(origin)
        return self._resolve_name(owner, attribute, depth + 1) if owner and owner is not module else None

    def qualified(self, module: Module, expr: ast.AST) -> str:
        """The dotted name `expr` stands for (through imports, also of modules not parsed)."""
        found = self.resolve(module, expr)
        if found and found[0] != "module":
            return f"{found[1].name}.{found[2]}"
        if isinstance(expr, ast.Name) and expr.id in module.imports:
            return module.imports[expr.id]
        return ast.unparse(expr)


def _absolute(package: str, module: str, level: int) -> str:
    if level == 0:
        return module
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def _self_targets(node: ast.AST) -> list[str]:
    """The attributes `node` assigns on self (`self.a = self.b = ...`)."""
    if not isinstance(node, ast.Assign):
        return []
    return [
        t.attr
        for t in node.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    ]


def _self_unpacked(node: ast.AST) -> list[str]:
    """The attributes `node` assigns on self, also inside tuples (`self.layers, self.n = ...`)."""
    if not isinstance(node, ast.Assign):
        return []
    targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return [
        t.attr
        for t in targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    ]


class Classes:
    """Class lookups over SGLang's source: bases in C3 order, methods, attribute types."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._mro: dict[ClassKey, list[ClassKey]] = {}

    def node(self, key: ClassKey) -> tuple[Module, ast.ClassDef]:
        module = self.source.module(key[0])
        assert module is not None, key
        return module, module.classes[key[1]]

    def key(self, module: Module, expr: ast.AST) -> ClassKey | None:
        if not isinstance(expr, ast.Name | ast.Attribute):
            return None
        found = self.source.resolve(module, expr)
        return (found[1].name, found[2]) if found and found[0] == "class" else None

    def mro(self, key: ClassKey) -> list[ClassKey]:
        if key not in self._mro:
            self._mro[key] = [key]  # a cycle guard while this one is computed
            module, node = self.node(key)
            bases = [base for expr in node.bases if (base := self.key(module, expr)) and base != key]
            self._mro[key] = [key, *_c3_merge([*(self.mro(base) for base in bases), bases])]
        return self._mro[key]

    def method(
        self, key: ClassKey, name: str, after: ClassKey | None = None
    ) -> tuple[ClassKey, ast.FunctionDef] | None:
        """`name` as `key` (or, for super(), the classes after `after` in its order) resolves it."""
        order = self.mro(key)
        if after is not None and after in order:
            order = order[order.index(after) + 1 :]
        for owner in order:
            module, node = self.node(owner)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return owner, item
                if _borrows(item, name):  # `name = Base.name`
                    other = self.key(module, item.value.value)  # type: ignore[attr-defined]
                    return self.method(other, item.value.attr) if other else None  # type: ignore[attr-defined]
        return None

    def attribute_types(self, key: ClassKey, attribute: str) -> list[ClassKey]:
        """The classes `self.<attribute> = Class(...)` builds in `__init__` along the bases."""
        found: list[ClassKey] = []
        for owner in self.mro(key):
            module, node = self.node(owner)
            for init in (i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"):
                for item in ast.walk(init):
                    if attribute in _self_targets(item):
                        calls = [c for c in ast.walk(item.value) if isinstance(c, ast.Call)]  # type: ignore[attr-defined]
                        found += [k for c in calls if (k := self.key(module, c.func)) and k not in found]
        return found


def _borrows(item: ast.stmt, name: str) -> bool:
    return (
        isinstance(item, ast.Assign)
        and isinstance(item.value, ast.Attribute)
        and any(isinstance(t, ast.Name) and t.id == name for t in item.targets)
    )


def _c3_merge(sequences: list[list[ClassKey]]) -> list[ClassKey]:
    sequences = [list(s) for s in sequences if s]
    out: list[ClassKey] = []
    while sequences:
        heads = [s[0] for s in sequences if not any(s[0] in other[1:] for other in sequences)]
        head = heads[0] if heads else sequences[0][0]  # inconsistent within what resolves: depth first
        out.append(head)
        sequences = [rest for s in sequences if (rest := [k for k in s if k != head])]
    return out


# --- the loader: which checkpoint names `load_weights` takes ---------------------------------------

_Work = tuple[ClassKey | None, ClassKey | None, Module, ast.FunctionDef]  # self's class, owner, module, code


class _LoaderWalk:
    """Follows `load_weights` of one architecture through the calls it makes."""

    def __init__(self, classes: Classes) -> None:
        self.classes = classes
        self.remap = False
        self.lookup = False

    def run(self, entry: ClassKey) -> None:
        start = self.classes.method(entry, "load_weights")
        queue: list[_Work] = [(entry, start[0], self.classes.node(start[0])[0], start[1])] if start else []
        seen: set[tuple[ClassKey | None, int]] = set()
        while queue:
            context, owner, module, function = queue.pop()
            if (context, id(function)) in seen:
                continue
            seen.add((context, id(function)))
            for node in _default_branch_nodes(function):
                if isinstance(node, ast.Call):
                    queue.extend(self._callees(context, owner, module, node))
                elif _looks_up_parameters(node):
                    self.lookup = True

    def _callees(
        self, context: ClassKey | None, owner: ClassKey | None, module: Module, call: ast.Call
    ) -> list[_Work]:
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        self.remap |= name == _REMAP
        self.lookup |= name == _AUTO_LOADER  # loads each checkpoint name into the parameter of that name
        if isinstance(func, ast.Name):
            named = self.classes.source.resolve(module, func)
            if named and named[0] == "function":
                return [(context, None, named[1], named[1].functions[named[2]])]
            return []
        return self._method_callees(context, owner, module, func) if isinstance(func, ast.Attribute) else []

    def _method_callees(
        self, context: ClassKey | None, owner: ClassKey | None, module: Module, func: ast.Attribute
    ) -> list[_Work]:
        value, classes = func.value, self.classes
        found: list[tuple[ClassKey | None, tuple[ClassKey, ast.FunctionDef] | None]] = []
        if context and isinstance(value, ast.Name) and value.id == "self":
            found.append((context, classes.method(context, func.attr)))
        elif context and owner and isinstance(value, ast.Call) and ast.unparse(value.func) == "super":
            found.append((context, classes.method(context, func.attr, after=owner)))
        elif context and isinstance(value, ast.Attribute) and ast.unparse(value.value) == "self":
            found += [
                (held, classes.method(held, func.attr))
                for held in classes.attribute_types(context, value.attr)
            ]
        elif named := classes.source.resolve(module, value):
            if named[0] == "class":
                found.append((context, classes.method((named[1].name, named[2]), func.attr)))
            elif named[0] == "module" and func.attr in named[1].functions:
                return [(context, None, named[1], named[1].functions[func.attr])]
        return [(ctx, m[0], classes.node(m[0])[0], m[1]) for ctx, m in found if m is not None]


def _default_branch_nodes(function: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of `function`, less the bodies of `if envs.SGLANG_ENABLE_WEIGHT_LOADER_V2...`."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _V2_SWITCH in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _looks_up_parameters(node: ast.AST) -> bool:
    """`params_dict[name]` or `name in params_dict`: a parameter looked up by checkpoint name."""
    if isinstance(node, ast.Subscript):
        return _is_parameter_dict(node.value) and not isinstance(node.slice, ast.Constant)
    if isinstance(node, ast.Compare):
        pairs = zip(node.ops, node.comparators, strict=True)
        return any(isinstance(op, ast.In | ast.NotIn) and _is_parameter_dict(right) for op, right in pairs)
    return False


def _is_parameter_dict(node: ast.expr) -> bool:
    return bool(_PARAMETER_DICT.fullmatch(ast.unparse(node)))


# --- the attention: where the RadixAttention sits and what the cache holds ------------------------


@dataclass(frozen=True)
class _ClassFacts:
    refs: list[ClassKey]  # bases and the classes the body names (also through module-level tables)
    names: set[str]  # every identifier the body uses
    radix: set[str]  # attributes assigned a RadixAttention
    builds: list[tuple[str, ClassKey]]  # (attribute, a class that `self.<attribute> = ...` builds)
    assigned: set[str]  # every attribute the body assigns on self


class _Attention:
    def __init__(self, classes: Classes) -> None:
        self.classes = classes
        self._facts: dict[ClassKey, _ClassFacts] = {}

    def facts(self, key: ClassKey) -> _ClassFacts:
        if key not in self._facts:
            self._facts[key] = self._read(key)
        return self._facts[key]

    def _read(self, key: ClassKey) -> _ClassFacts:
        classes = self.classes
        module, node = classes.node(key)
        facts = _ClassFacts(classes.mro(key)[1:], set(), set(), [], set())
        for item in ast.walk(node):
            if isinstance(item, ast.Name | ast.Attribute):
                facts.names.add(item.id if isinstance(item, ast.Name) else item.attr)
                if named := classes.key(module, item):
                    facts.refs.append(named)
                elif isinstance(item, ast.Name) and item.id in module.aliases:  # e.g. a dict of layer classes
                    facts.refs.extend(
                        k for e in ast.walk(module.aliases[item.id]) if (k := classes.key(module, e))
                    )
            facts.assigned.update(_self_unpacked(item))
            if attributes := _self_targets(item):
                value = item.value  # type: ignore[attr-defined]
                if isinstance(value, ast.Call) and classes.source.qualified(module, value.func) == _RADIX:
                    facts.radix.update(attributes)
                for call in (c for c in ast.walk(value) if isinstance(c, ast.Call)):
                    if (built := classes.key(module, call.func)) and built != key:
                        facts.builds.extend((attribute, built) for attribute in attributes)
        return facts

    def reachable(self, entry: ClassKey) -> list[ClassKey]:
        """`entry`, its bases and every model class their code names, transitively."""
        order: list[ClassKey] = []
        queue = [entry]
        while queue:
            key = queue.pop(0)
            if key not in order and key[0].startswith(_MODELS):
                order.append(key)
                queue.extend(self.facts(key).refs)
        return order

    def of(self, entry: ClassKey) -> tuple[set[str], list[str], bool]:
        """(RadixAttention attributes, `<attribute>.<RadixAttention attribute>` pairs, whether the
        code can build a state-space or linear-attention layer). No pairs unless the decoder layers
        sit at `model.layers` (the entry class assigns `self.model`, a class it reaches `self.layers`)."""
        reachable = self.reachable(entry)
        facts = {key: self.facts(key) for key in reachable}
        layered = any("model" in facts[k].assigned for k in self.classes.mro(entry) if k in facts) and any(
            "layers" in f.assigned for f in facts.values()
        )

        def holds(key: ClassKey) -> set[str]:
            return set().union(*(facts[base].radix for base in self.classes.mro(key) if base in facts))

        pairs = {
            f"{attribute}.{radix}"
            for key in reachable
            for attribute, built in facts[key].builds
            if built in facts
            for radix in holds(built)
            if layered
        }
        mixers = any(_MIXERS.search(name) for f in facts.values() for name in f.names)
        return set().union(*(f.radix for f in facts.values())), sorted(pairs), mixers


def derive(classes: Classes, attention: _Attention, entry: ClassKey) -> Paths:
    loader = _LoaderWalk(classes)
    loader.run(entry)
    radix, pairs, mixers = attention.of(entry)
    chosen = pairs
    if not radix:
        cache = "other"
    elif mixers:
        cache = "hybrid"
    elif "attn_mqa" in radix:
        cache, chosen = "mla", [pair for pair in pairs if pair.endswith(".attn_mqa")]
    else:
        cache = "gqa"
    return Paths(
        remap=loader.remap,
        exact=loader.lookup and not loader.remap,
        json=classes.method(entry, "load_kv_cache_scales") is not None,
        cache=cache,
        attention=chosen[0] if len(chosen) == 1 else "",
        module=entry[0].removeprefix(_MODELS),
    )


def architectures(source: Source) -> dict[str, ClassKey]:
    """Every class an `EntryClass` of a module directly under sglang/srt/models names, by class name."""
    found: dict[str, ClassKey] = {}
    for path in sorted((source.package / "srt/models").glob("*.py")):
        module = source.module(f"{_MODELS}{path.stem}")
        entry = module.aliases.get("EntryClass") if module else None
        if module is None or entry is None:
            continue
        for element in entry.elts if isinstance(entry, ast.List | ast.Tuple) else [entry]:
            named = source.resolve(module, element)
            if named and named[0] == "class":
                found[named[2]] = (named[1].name, named[2])
    return dict(sorted(found.items()))


def sglang_package() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        raise SystemExit("SGLang is not installed in this environment; install it (hack/venv.sh does)")
    return Path(spec.origin).parent


def table(package: Path | None = None) -> tuple[str, dict[str, Paths]]:
    """(SGLang's version, the paths per architecture) from the installed SGLang's source."""
    source = Source(package or sglang_package())
    classes = Classes(source)
    attention = _Attention(classes)
    paths = {name: derive(classes, attention, key) for name, key in architectures(source).items()}
    return importlib.metadata.version("sglang"), paths


_MODULE_HEAD = '''\
"""How SGLang {version} loads FP8 KV-cache scales, per architecture it serves.

generated by {generator} from SGLang {version}'s source; do not edit. After an SGLang bump,
rerun `python {generator}` (until then test_kv_scale_paths_match_installed_sglang.py fails).
docs/kv-scale-paths.md shows the same table; the generator's docstring says how each field is read.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

SGLANG_VERSION = "{version}"
CacheKind = Literal["gqa", "mla", "hybrid", "other"]


class ScalePaths(NamedTuple):
    remap: bool  # takes `model.layers.N.self_attn.k_scale` through maybe_remap_kv_scale_name
    exact: bool  # takes the RadixAttention's own parameter names, `model.layers.N.<attention>.k_scale`
    json: bool  # reads per-layer scales from --quantization-param-path (load_kv_cache_scales)
    cache: CacheKind  # what the KV cache holds: GQA/MHA K and V, DeepSeek's MLA latent, or otherwise
    attention: str  # `<decoder layer attribute>.<RadixAttention attribute>`; "" when not derived


_ = ScalePaths
KV_SCALE_PATHS: dict[str, ScalePaths] = {{
'''


def render_module(version: str, paths: dict[str, Paths]) -> str:
    rows = [
        f'    "{name}": _({p.remap}, {p.exact}, {p.json}, "{p.cache}", "{p.attention}"),\n'
        for name, p in paths.items()
    ]
    return _MODULE_HEAD.format(version=version, generator=GENERATOR) + "".join(rows) + "}\n"


def render_doc(version: str, paths: dict[str, Paths]) -> str:
    count = {
        "remap": sum(p.remap for p in paths.values()),
        "exact": sum(p.exact for p in paths.values()),
        "json": sum(p.json for p in paths.values()),
        "none": sum(not (p.remap or p.exact or p.json) for p in paths.values()),
    }
    kinds = {kind: sum(p.cache == kind for p in paths.values()) for kind in ("gqa", "mla", "hybrid", "other")}
    lines = [
        f"# FP8 KV-cache scales: where SGLang {version} reads them, per architecture",
        "",
        f"Generated by `{GENERATOR}` from SGLang {version}'s source; do not edit. The same table is",
        "`contracts/src/kvant_contracts/kv_scale_paths.py`, which `kvant calibrate` reads.",
        "",
        f"{len(paths)} architectures (the `EntryClass` classes of `sglang/srt/models/`): "
        f"{count['remap']} take compressed-tensors names through `maybe_remap_kv_scale_name`, "
        f"{count['exact']} take the RadixAttention's own parameter names, {count['json']} also read "
        f"`--quantization-param-path`, {count['none']} load no scales (FP8 KV runs at scale 1.0). "
        f"Cache: {kinds['gqa']} GQA/MHA, {kinds['mla']} DeepSeek MLA, {kinds['hybrid']} hybrid "
        f"(state-space or linear-attention layers), {kinds['other']} other.",
        "",
        "- *remapped names*: the checkpoint names that `maybe_remap_kv_scale_name` maps onto the",
        "  RadixAttention `self_attn.attn` (compressed-tensors' convention). A loader that remaps also",
        "  drops exact names (it maps `...attn.k_scale` to `...attn.attn.k_scale`, no parameter).",
        "- *exact names*: the parameters that the KV-cache quant method (`BaseKVCacheMethod.create_weights`,",
        "  attached by a compressed-tensors `kv_cache_scheme`) registers on the RadixAttention, looked up",
        "  by name. `?` where the attention's attribute path was not derived.",
        "- *JSON*: the class has `load_kv_cache_scales`, which reads `--quantization-param-path`",
        "  (`QuantParamSchema`: one scale per layer for K and V, one map per TP rank).",
        "- *cache*: what the cache holds; Kvant calibrates `gqa` and `mla`.",
        "",
        "The analysis and its limits are described in the generator's docstring.",
        "",
        "| architecture | SGLang module | remapped names | exact names | JSON | cache |",
        "|---|---|---|---|---|---|",
    ]
    for name, p in paths.items():
        remapped = "`model.layers.N.self_attn.{k,v}_scale`" if p.remap else "-"
        exact = (f"`model.layers.N.{p.attention}.{{k,v}}_scale`" if p.attention else "?") if p.exact else "-"
        lines.append(
            f"| {name} | {p.module} | {remapped} | {exact} | {'yes' if p.json else '-'} | {p.cache} |"
        )
    return "\n".join(lines) + "\n"


def outputs(package: Path | None = None) -> dict[Path, str]:
    """The generated files' contents, from the installed SGLang."""
    version, paths = table(package)
    return {TABLE_MODULE: render_module(version, paths), TABLE_DOC: render_doc(version, paths)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if not path.is_file() or path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text)
    if args.check and stale:
        print(f"stale: {', '.join(map(str, stale))}; rerun `python {GENERATOR}`", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
