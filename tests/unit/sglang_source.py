"""Pieces of SGLang's own code, compiled from its installed source so they run on CPU.

SGLang is installed without its GPU dependencies, so its model modules cannot be imported. The
functions, methods and classes that decide where FP8 KV-cache scales land are plain Python over
torch and pydantic, though: each is taken from SGLang's file with `ast` and compiled on its own, with
the few names it uses (SGLang's own helpers, compiled the same way) in its namespace.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import re
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic
import torch
from torch import nn

SGLANG = Path(importlib.util.find_spec("sglang").origin).parent / "srt"  # type: ignore[arg-type, union-attr]
WEIGHT_UTILS = "model_loader/weight_utils.py"


def _tree(relative: str) -> ast.Module:
    return ast.parse((SGLANG / relative).read_text())


def _compiled(nodes: Sequence[ast.stmt], relative: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Runs `nodes` as the body of a module of their own (pydantic resolves annotations through it)."""
    name = "sglang_source_" + re.sub(r"\W", "_", relative) + f"_{len(sys.modules)}"
    module = types.ModuleType(name)
    base = {"Optional": typing.Optional, "Dict": dict, "Tuple": tuple, "Iterable": typing.Iterable}
    module.__dict__.update({**base, "logger": logging.getLogger(f"sglang:{relative}"), **namespace})
    sys.modules[name] = module
    exec(
        compile(ast.Module(body=list(nodes), type_ignores=[]), str(SGLANG / relative), "exec"),
        module.__dict__,
    )
    return module.__dict__


def sglang_function(relative: str, name: str, **namespace: Any) -> Any:
    """One top-level function of SGLang's file `relative` (under sglang/srt)."""
    node = next(n for n in _tree(relative).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return _compiled([node], relative, {"print_warning_once": print, **namespace})[name]


def sglang_method(relative: str, class_name: str, name: str, **namespace: Any) -> Any:
    """Method `name` of class `class_name`, as a function taking `self` first."""
    cls = next(n for n in _tree(relative).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    node = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return _compiled([node], relative, namespace)[name]


def radix_attribute(relative: str, class_name: str) -> list[str]:
    """The attributes that `class_name`'s code assigns a RadixAttention to."""
    cls = next(n for n in _tree(relative).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    return sorted(
        target.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "RadixAttention"
        for target in node.targets
        if isinstance(target, ast.Attribute)
    )


def attribute_holding(relative: str, class_name: str, held_class: str) -> str:
    """The attribute that `class_name`'s `__init__` assigns an instance of `held_class` to."""
    cls = next(n for n in _tree(relative).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and ast.unparse(node.value).startswith(f"{held_class}("):
            return ast.unparse(node.targets[0]).removeprefix("self.")
    raise AssertionError(f"{relative}: {class_name} builds no {held_class}")


def create_kv_scale_parameters() -> Any:
    """`BaseKVCacheMethod.create_weights`: what a compressed-tensors kv_cache_scheme adds to each
    RadixAttention (`k_scale`, `v_scale`)."""
    return sglang_method(
        "layers/quantization/kv_cache.py", "BaseKVCacheMethod", "create_weights", torch=torch
    )


def weight_loading_namespace() -> dict[str, Any]:
    """The helpers SGLang's model loaders call, compiled from SGLang."""
    return {
        "get_layer_id": sglang_function("layers/utils/common.py", "get_layer_id", re=re),
        "default_weight_loader": sglang_function(WEIGHT_UTILS, "default_weight_loader", torch=torch),
        "maybe_remap_kv_scale_name": sglang_function(WEIGHT_UTILS, "maybe_remap_kv_scale_name"),
        "torch": torch,
        "nn": nn,
    }


def model_with_kv_scales(layers: int, attention: str, with_scales: bool = True) -> Any:
    """A module tree `model.layers.N.<attention>` whose RadixAttention stand-ins start as SGLang's do
    (`k_scale = None`) and then get the KV-cache quant method's parameters."""
    create_weights = create_kv_scale_parameters()
    root: Any = nn.Module()
    root.model = nn.Module()
    root.model.layers = nn.ModuleList()
    for _ in range(layers):
        layer = nn.Module()
        holder: nn.Module = layer
        *parents, radix_name = attention.split(".")
        for part in parents:
            child = nn.Module()
            holder.add_module(part, child)
            holder = child
        radix: Any = nn.Module()
        radix.k_scale = radix.v_scale = None
        holder.add_module(radix_name, radix)
        if with_scales:
            create_weights(None, radix)
        root.model.layers.append(layer)
    root.config = SimpleNamespace(tie_word_embeddings=False, num_hidden_layers=layers)
    return root


def quant_param_loader() -> Any:
    """`kv_cache_scales_loader` with SGLang's `QuantParamSchema` (and `KVCacheQuantSchema`)."""
    tree = _tree(WEIGHT_UTILS)
    wanted = {"KVCacheQuantSchema", "QuantParamSchema", "kv_cache_scales_loader"}
    nodes = [n for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name in wanted]
    names = ("BaseModel", "ConfigDict", "ValidationInfo", "model_validator")
    namespace = {"json": json, **{name: getattr(pydantic, name) for name in names}}
    return _compiled(nodes, WEIGHT_UTILS, namespace)["kv_cache_scales_loader"]
