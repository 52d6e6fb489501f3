"""Derive, from the installed SGLang's source, how each architecture it serves loads FP8 KV-cache scales.

    python hack/gen_kv_scale_paths.py           # rewrites the two outputs below
    python hack/gen_kv_scale_paths.py --check   # exit 1 when they differ from what SGLang's source says

Outputs: runtime/src/kvant_runtime/calibrate/kv_scale_paths.py (the table calibration reads) and
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
  when exactly one pair is found; empty when that is unknown or ambiguous.

How the loader is followed: `load_weights` is looked up along the class's bases within SGLang's
source (a C3 order over every base that resolves to a SGLang class, any depth); calls are followed
through `self.method()`, `super().method()`, `Class.method(self)`, module functions (also imported
ones) and `self.<attr>.method()` where `__init__` assigns `self.<attr> = SomeClass(...)`. Branches
under `if envs.SGLANG_ENABLE_WEIGHT_LOADER_V2...` are skipped: that loader is off by default.

Limits: the analysis reads call structure, not values. It does not know whether a renaming on the
way (a stacked-parameter mapping, a prefix filter) changes a scale name before the lookup, nor
whether a remap call's result is used to load the tensor; it takes `model.layers.N` as the layer
path (multimodal wrappers hold the language model under another prefix); attributes assigned through
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
TABLE_MODULE = ROOT / "runtime/src/kvant_runtime/calibrate/kv_scale_paths.py"
TABLE_DOC = ROOT / "docs/kv-scale-paths.md"
GENERATOR = "hack/gen_kv_scale_paths.py"
_REMAP = "maybe_remap_kv_scale_name"
_RADIX = "sglang.srt.layers.radix_attention.RadixAttention"
_AUTO_LOADER = "AutoWeightsLoader"
_MODELS = "sglang.srt.models."
_PARSED = (_MODELS, "sglang.srt.model_loader.")
_V2_SWITCH = "SGLANG_ENABLE_WEIGHT_LOADER_V2"
_MIXERS = re.compile(
    r"Mamba|LinearAttention|LinearAttn|GatedDeltaNet|Lightning|ShortConv|KimiDelta|SSM|MiniMaxM2Linear"
)


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
    tree: ast.Module
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target


ClassKey = tuple[str, str]  # (module, class name)


class Source:
    """SGLang's modules, parsed on demand by dotted name."""

    def __init__(self, package: Path) -> None:
        self.package = package  # the folder of `sglang`
        self._modules: dict[str, Module | None] = {}

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            self._modules[name] = self._parse(name)
        return self._modules[name]

    def _parse(self, name: str) -> Module | None:
        if not name.startswith(_PARSED):  # what loaders and model classes are made of
            return None
        base = self.package.parent / name.replace(".", "/")
        path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not path.is_file():
            return None
        tree = ast.parse(path.read_text(), str(path))
        module = Module(name, tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                module.classes[node.name] = node
            elif isinstance(node, ast.FunctionDef):
                module.functions[node.name] = node
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                module.aliases[node.targets[0].id] = node.value
        for node in ast.walk(tree):  # imports inside functions count too (loaders import lazily)
            if isinstance(node, ast.ImportFrom):
                origin = _absolute(package, node.module or "", node.level)
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = f"{origin}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    module.imports[alias.asname or alias.name.partition(".")[0]] = (
                        alias.name if alias.asname else alias.name.partition(".")[0]
                    )
        return module

    def resolve(self, module: Module, expr: ast.expr, depth: int = 0) -> tuple[str, Module, str] | None:
        """What `expr` names in `module`: ("class" | "function" | "module", defining module, name)."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Name):
            return self._resolve_name(module, expr.id, depth)
        if isinstance(expr, ast.Attribute):
            owner = self.resolve(module, expr.value, depth + 1)
            if owner and owner[0] == "module":
                return self._resolve_name(owner[1], expr.attr, depth + 1)
        return None

    def _resolve_name(self, module: Module, name: str, depth: int) -> tuple[str, Module, str] | None:
        if name in module.classes:
            return ("class", module, name)
        if name in module.functions:
            return ("function", module, name)
        if name in module.aliases:
            return self.resolve(module, module.aliases[name], depth + 1)
        target = module.imports.get(name)
        if target is None:
            return None
        if (imported := self.module(target)) is not None:
            return ("module", imported, "")
        origin, _, attr = target.rpartition(".")
        if (owner := self.module(origin)) is not None and owner is not module:
            return self._resolve_name(owner, attr, depth + 1)
        return None

    def qualified(self, module: Module, expr: ast.expr) -> str:
        """The dotted name `expr` stands for (resolved through imports), or its source text."""
        found = self.resolve(module, expr)
        if found and found[0] in ("class", "function"):
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


class Classes:
    """Class lookups over SGLang's source: bases, method resolution, attribute types."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._mro: dict[ClassKey, list[ClassKey]] = {}

    def node(self, key: ClassKey) -> tuple[Module, ast.ClassDef]:
        module = self.source.module(key[0])
        assert module is not None
        return module, module.classes[key[1]]

    def key(self, module: Module, expr: ast.expr) -> ClassKey | None:
        found = self.source.resolve(module, expr)
        return (found[1].name, found[2]) if found and found[0] == "class" else None

    def mro(self, key: ClassKey) -> list[ClassKey]:
        if key not in self._mro:
            self._mro[key] = [key]  # a cycle guard while this one is computed
            module, node = self.node(key)
            bases = [base for expr in node.bases if (base := self.key(module, expr)) and base != key]
            self._mro[key] = [key, *_c3_merge([self.mro(base) for base in bases] + [bases])]
        return self._mro[key]

    def method(
        self, key: ClassKey, name: str, after: ClassKey | None = None
    ) -> tuple[ClassKey, ast.FunctionDef] | None:
        order = self.mro(key)
        if after is not None and after in order:
            order = order[order.index(after) + 1 :]
        for owner in order:
            module, node = self.node(owner)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return owner, item
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in item.targets
                ):
                    if isinstance(item.value, ast.Attribute) and (
                        other := self.key(module, item.value.value)
                    ):
                        return self.method(other, item.value.attr)
        return None

    def attribute_types(self, key: ClassKey, attribute: str) -> list[ClassKey]:
        """Classes `self.<attribute>` is built from in the `__init__` methods along the bases."""
        found: list[ClassKey] = []
        for owner in self.mro(key):
            module, node = self.node(owner)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    for assign in ast.walk(item):
                        if _assigns_self(assign, attribute) and isinstance(assign.value, ast.Call):  # type: ignore[attr-defined]
                            if (cls := self.key(module, assign.value.func)) and cls not in found:  # type: ignore[attr-defined]
                                found.append(cls)
        return found


def _c3_merge(sequences: list[list[ClassKey]]) -> list[ClassKey]:
    sequences = [list(s) for s in sequences if s]
    out: list[ClassKey] = []
    while sequences:
        for seq in sequences:
            head = seq[0]
            if not any(head in other[1:] for other in sequences):
                break
        else:  # inconsistent within what resolves: fall back to depth-first order
            head = sequences[0][0]
        out.append(head)
        sequences = [[k for k in s if k != head] for s in sequences]
        sequences = [s for s in sequences if s]
    return out


def _assigns_self(node: ast.AST, attribute: str | None = None) -> bool:
    if not isinstance(node, ast.Assign):
        return False
    return any(
        isinstance(t, ast.Attribute)
        and isinstance(t.value, ast.Name)
        and t.value.id == "self"
        and (attribute is None or t.attr == attribute)
        for t in node.targets
    )


@dataclass
class _Loader:
    remap: bool = False
    exact: bool = False


_Work = tuple[ClassKey | None, ClassKey | None, Module, ast.FunctionDef]  # self's class, owner, module, code


def loader_paths(classes: Classes, entry: ClassKey) -> _Loader:
    """Which names the loader reached from `entry.load_weights` takes (see the module docstring)."""
    found = _Loader()
    start = classes.method(entry, "load_weights")
    if start is None:
        return found
    queue: list[_Work] = [(entry, start[0], classes.node(start[0])[0], start[1])]
    seen: set[tuple[ClassKey | None, int]] = set()
    while queue:
        context, owner, module, function = queue.pop()
        if (context, id(function)) in seen:
            continue
        seen.add((context, id(function)))
        for node in _default_branch_nodes(function):
            if isinstance(node, ast.Call):
                queue.extend(_callees(classes, found, context, owner, module, node))
            elif _looks_up_parameters(node):
                found.exact = True
    found.exact = found.exact and not found.remap
    return found


def _default_branch_nodes(function: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of `function`, without the bodies of `if envs.SGLANG_ENABLE_WEIGHT_LOADER_V2...`."""
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


def _callees(
    classes: Classes,
    found: _Loader,
    context: ClassKey | None,
    owner: ClassKey | None,
    module: Module,
    call: ast.Call,
) -> list[_Work]:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if name == _REMAP:
        found.remap = True
        return []
    if name == _AUTO_LOADER:
        found.exact = True  # loads every checkpoint name into the parameter of that name
        return []
    targets: list[tuple[ClassKey | None, tuple[ClassKey, ast.FunctionDef] | None]] = []
    if isinstance(func, ast.Name):
        resolved = classes.source.resolve(module, func)
        if resolved and resolved[0] == "function":
            return [(context, None, resolved[1], resolved[1].functions[resolved[2]])]
        return []
    if not isinstance(func, ast.Attribute):
        return []
    value = func.value
    if isinstance(value, ast.Name) and value.id == "self" and context:
        targets.append((context, classes.method(context, func.attr)))
    elif _is_super(value) and context and owner:
        targets.append((context, classes.method(context, func.attr, after=owner)))
    elif (
        isinstance(value, ast.Attribute)
        and isinstance(value.value, ast.Name)
        and value.value.id == "self"
        and context
    ):
        for held in classes.attribute_types(context, value.attr):
            targets.append((held, classes.method(held, func.attr)))
    else:
        resolved = classes.source.resolve(module, value)
        if resolved and resolved[0] == "class":
            targets.append((context, classes.method((resolved[1].name, resolved[2]), func.attr)))
        elif resolved and resolved[0] == "module" and func.attr in resolved[1].functions:
            return [(context, None, resolved[1], resolved[1].functions[func.attr])]
    return [(ctx, m[0], classes.node(m[0])[0], m[1]) for ctx, m in targets if m is not None]


def _is_super(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _looks_up_parameters(node: ast.AST) -> bool:
    """`params_dict[name]`, `name in params_dict`, `params_dict.get(name)`: a lookup by checkpoint name."""
    if isinstance(node, ast.Subscript):
        return _is_parameter_dict(node.value) and not isinstance(node.slice, ast.Constant)
    if isinstance(node, ast.Compare):
        return any(
            isinstance(op, ast.In | ast.NotIn) and _is_parameter_dict(right)
            for op, right in zip(node.ops, node.comparators, strict=True)
        )
    return False


def _is_parameter_dict(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return bool(re.fullmatch(r"(self\.)?params?(_dict)?", text))


@dataclass(frozen=True)
class _ClassFacts:
    refs: list[ClassKey]  # bases and the model classes the body names (also through module-level tables)
    names: set[str]  # every identifier the body uses
    radix: set[str]  # attributes assigned a RadixAttention
    builds: list[tuple[str, ClassKey]]  # (attribute, class whose instance `self.<attribute> = ...` holds)


def class_facts(classes: Classes, key: ClassKey, cache: dict[ClassKey, _ClassFacts]) -> _ClassFacts:
    if key in cache:
        return cache[key]
    module, node = classes.node(key)
    refs = classes.mro(key)[1:]
    names: set[str] = set()
    radix: set[str] = set()
    builds: list[tuple[str, ClassKey]] = []
    for item in ast.walk(node):
        if isinstance(item, ast.Name | ast.Attribute):
            names.add(item.id if isinstance(item, ast.Name) else item.attr)
            if named := classes.key(module, item):
                refs.append(named)
            elif isinstance(item, ast.Name) and item.id in module.aliases:  # e.g. a dict of layer classes
                refs.extend(
                    k for e in ast.walk(module.aliases[item.id]) if (k := _class_named(classes, module, e))
                )
        if _assigns_self(item) and isinstance(item, ast.Assign):
            attributes = [t.attr for t in item.targets if isinstance(t, ast.Attribute)]
            if (
                isinstance(item.value, ast.Call)
                and classes.source.qualified(module, item.value.func) == _RADIX
            ):
                radix.update(attributes)
            for call in ast.walk(item.value):
                if isinstance(call, ast.Call) and (built := classes.key(module, call.func)) and built != key:
                    builds.extend((attribute, built) for attribute in attributes)
    cache[key] = _ClassFacts(refs, names, radix, builds)
    return cache[key]


def _class_named(classes: Classes, module: Module, node: ast.AST) -> ClassKey | None:
    return classes.key(module, node) if isinstance(node, ast.Name | ast.Attribute) else None


def reachable_classes(
    classes: Classes, entry: ClassKey, cache: dict[ClassKey, _ClassFacts]
) -> list[ClassKey]:
    """`entry`, its bases and every model class its code names, transitively (sglang.srt.models only)."""
    order: list[ClassKey] = []
    seen: set[ClassKey] = set()
    queue = [entry]
    while queue:
        key = queue.pop(0)
        if key in seen or not key[0].startswith(_MODELS):
            continue
        seen.add(key)
        order.append(key)
        queue.extend(class_facts(classes, key, cache).refs)
    return order


def attention_facts(
    classes: Classes, entry: ClassKey, cache: dict[ClassKey, _ClassFacts]
) -> tuple[set[str], list[str], bool]:
    """(RadixAttention attributes, `<decoder attribute>.<RadixAttention attribute>` pairs, whether the
    code can build a state-space or linear-attention mixer)."""
    reachable = reachable_classes(classes, entry, cache)
    facts = {key: class_facts(classes, key, cache) for key in reachable}

    def holds(key: ClassKey) -> set[str]:
        return set().union(*(facts[base].radix for base in classes.mro(key) if base in facts))

    pairs = {
        f"{attribute}.{radix}"
        for key in reachable
        for attribute, built in facts[key].builds
        if built in facts
        for radix in holds(built)
    }
    mixers = any(_MIXERS.search(name) for key in reachable for name in facts[key].names)
    return set().union(*(f.radix for f in facts.values())), sorted(pairs), mixers


def derive(classes: Classes, entry: ClassKey, cache: dict[ClassKey, _ClassFacts]) -> Paths:
    loader = loader_paths(classes, entry)
    radix, pairs, mixers = attention_facts(classes, entry, cache)
    chosen = pairs
    if not radix:
        cache = "other"
    elif mixers:
        cache = "hybrid"
    elif "attn_mqa" in radix:
        cache = "mla"
        chosen = [pair for pair in pairs if pair.endswith(".attn_mqa")]
    else:
        cache = "gqa"
    json = classes.method(entry, "load_kv_cache_scales") is not None
    attention = chosen[0] if len(chosen) == 1 else ""
    return Paths(
        loader.remap, loader.exact, json, cache, attention, entry[0].removeprefix("sglang.srt.models.")
    )


def architectures(source: Source) -> dict[str, ClassKey]:
    """Every class an `EntryClass` of a module directly under sglang/srt/models names, by class name."""
    found: dict[str, ClassKey] = {}
    for path in sorted((source.package / "srt/models").glob("*.py")):
        module = source.module(f"sglang.srt.models.{path.stem}")
        entry = module.aliases.get("EntryClass") if module else None
        if module is None or entry is None:
            continue
        for element in entry.elts if isinstance(entry, ast.List | ast.Tuple) else [entry]:
            resolved = source.resolve(module, element)
            if resolved and resolved[0] == "class":
                found[resolved[2]] = (resolved[1].name, resolved[2])
    return dict(sorted(found.items()))


def sglang_package() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        raise SystemExit("SGLang is not installed in this environment; install it (hack/venv.sh does)")
    return Path(spec.origin).parent


def sglang_version() -> str:
    return importlib.metadata.version("sglang")


def table(package: Path | None = None) -> tuple[str, dict[str, Paths]]:
    """(SGLang's version, the paths per architecture) from the installed SGLang's source."""
    package = package or sglang_package()
    source = Source(package)
    classes = Classes(source)
    cache: dict[ClassKey, _ClassFacts] = {}
    return sglang_version(), {
        name: derive(classes, key, cache) for name, key in architectures(source).items()
    }


_MODULE_HEAD = '''\
"""How SGLang {version} loads FP8 KV-cache scales, per architecture it serves.

generated by {generator} from SGLang {version}'s source; do not edit. After an SGLang bump, rerun
`python {generator}` (tests/unit/test_kv_scale_paths_match_installed_sglang.py fails until then).
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
        "`runtime/src/kvant_runtime/calibrate/kv_scale_paths.py`, which `kvant calibrate` reads.",
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
