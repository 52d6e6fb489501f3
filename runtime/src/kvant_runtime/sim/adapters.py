"""LoRA adapters in the simulator: a stand-in for SGLang 0.5.23's runtime adapter API, because
SGLang's LoRA cannot start on its CPU backend (docs/design/adapters-research.md, section 6), so in
the local cluster nothing real can load an adapter.

What it keeps of SGLang, read from its source (the research note's sections 2, 3 and 5):

- `POST /load_lora_adapter {lora_name, lora_path, pinned}` reads `adapter_config.json` at the path
  and refuses, with SGLang's messages and a 400: LoRA off, a name already loaded, an unreadable or
  non-LoRA config, DoRA, a rank above `--max-lora-rank`, target modules outside
  `--lora-target-modules` (after SGLang's stacking: q/k/v are one buffer, gate/up one), and pinning
  the last free slot. Past `--max-loaded-loras` it drops the least recently used unpinned adapter.
- `POST /unload_lora_adapter {lora_name}`: 400 for a name not loaded.
- A request names an adapter as SGLang reads it: OpenAI `model: "BASE:ADAPTER"` (split after the
  served name when it starts with it, else at the first colon), else the body's `lora_path`. A name
  never loaded is a 400 ("Got LoRA adapter that has never been loaded"). A name loaded once and
  unloaded since is loaded again from its old path, as SGLang's tokenizer manager does: unloading
  frees memory but does not revoke a name, which is why the gate must refuse it.
- `GET /v1/models` lists each adapter after the base model (`id`, `root` its path, `parent`).

The scheduler keeps SGLang's slot rule: a batch runs at most `--max-loras-per-batch` distinct
adapters, the base model counting as one, and a waiting request whose adapter would not fit waits
while later ones run (kvant_runtime.sim.engine, `_admit`). What it leaves out: the adapter's
weights (an answer does not depend on the adapter), pinned adapters' reserved slots in that rule,
and the time a load takes; the pool's memory is in the plan's KV tokens the simulator starts with.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from kvant_contracts.lora import LORA_TARGET_NAMES, LoraEnvelope, LoraTarget, normalized
from kvant_runtime.sim.request_io import read_json

ADAPTER_CONFIG = "adapter_config.json"
# Adapter configs that cover every linear module pass SGLang's subset check without a comparison.
_ALL_MODULES = ("all", "all-linear")


class AdapterRefused(ValueError):
    """A load or unload SGLang would refuse; the message is SGLang's."""


@dataclass(frozen=True)
class Adapter:
    name: str
    path: str
    rank: int
    pinned: bool = False


class AdapterRegistry:
    """The adapters one engine has loaded; `envelope` None: the engine started without LoRA."""

    def __init__(self, envelope: LoraEnvelope | None) -> None:
        self.envelope = envelope
        self._loaded: OrderedDict[str, Adapter] = OrderedDict()  # least recently used first
        self._ever: dict[str, tuple[str, bool]] = {}  # name -> (path, pinned): SGLang's lora_ref_cache

    @property
    def loaded(self) -> dict[str, str]:
        return {name: adapter.path for name, adapter in self._loaded.items()}

    def load(self, name: str, path: str, pinned: bool = False) -> None:
        envelope = self._enabled()
        if name in self._loaded:
            raise AdapterRefused(f"Failed to load LoRA adapter {name} because it is already loaded")
        rank = _check_config(name, Path(path), envelope)
        if pinned and sum(a.pinned for a in self._loaded.values()) + 1 > envelope.slots - 1:
            raise AdapterRefused(
                f"Failed to load LoRA adapter {name} as a pinned adapter. It is not allowed to pin all slots "
                "in the LoRA memory pool to avoid starvation for unpinned adapters and base models."
            )
        self._loaded[name] = Adapter(name, path, rank, pinned)
        self._ever[name] = (path, pinned)
        self._evict_past_the_bound()

    def unload(self, name: str) -> None:
        self._enabled()
        if name not in self._loaded:
            raise AdapterRefused(f"LoRA with name {name} does not exist. Loaded LoRAs: {list(self._loaded)}")
        del self._loaded[name]

    def resolve(self, body: dict[str, Any], served_name: str, native: bool = False) -> str | None:
        """The adapter a request names, or None for the base model; ValueError (a 400) as SGLang."""
        name = _named_adapter(body, served_name, native)
        if name is None:
            return None
        if self.envelope is None:
            raise ValueError(
                f"LoRA adapter '{name}' was requested, but LoRA is not enabled. Please launch the server "
                "with --enable-lora flag and preload adapter using --lora-paths or /load_lora_adapter "
                "endpoint."
            )
        if name not in self._loaded:
            if name not in self._ever:
                raise ValueError(
                    f"Got LoRA adapter that has never been loaded: {name}\n"
                    f"All loaded adapters: {list(self._loaded)}."
                )
            self.load(name, *self._ever[name])  # SGLang reloads an unloaded or evicted name
        self._loaded.move_to_end(name)
        return name

    def model_cards(self, served_name: str) -> list[dict[str, Any]]:
        return [
            {
                "id": a.name,
                "object": "model",
                "created": 0,
                "owned_by": "kvant-sim",
                "root": a.path,
                "parent": served_name,
            }
            for a in self._loaded.values()
        ]

    def _enabled(self) -> LoraEnvelope:
        if self.envelope is None:
            raise AdapterRefused("LoRA is not enabled. Please set `--enable-lora` to enable LoRA.")
        return self.envelope

    def _evict_past_the_bound(self) -> None:
        bound = self._enabled().max_loaded
        while bound is not None and len(self._loaded) > bound:
            victim = next((n for n, a in self._loaded.items() if not a.pinned), None)
            if victim is None:
                raise AdapterRefused("Didn't find any LoRA adapters when trying to evict LRU LoRA adapter.")
            del self._loaded[victim]


def add_adapter_routes(app: web.Application, registry: AdapterRegistry) -> None:
    """SGLang's two adapter routes, answering as its LoRAUpdateOutput: 200 when the update succeeded,
    400 with SGLang's message when not; `loaded_adapters` is the set after it."""

    def answer(update: Callable[[], None]) -> web.Response:
        try:
            update()
        except AdapterRefused as refused:
            body = {"success": False, "error_message": str(refused), "loaded_adapters": registry.loaded}
            return web.json_response(body, status=400)
        return web.json_response({"success": True, "error_message": None, "loaded_adapters": registry.loaded})

    async def load(request: web.Request) -> web.Response:
        body = await read_json(request)
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise ValueError("load_lora_adapter needs lora_name and lora_path (strings)")
        return answer(lambda: registry.load(name, path, bool(body.get("pinned"))))

    async def unload(request: web.Request) -> web.Response:
        name = (await read_json(request)).get("lora_name")
        if not isinstance(name, str) or not name:
            raise ValueError("unload_lora_adapter needs lora_name (a string)")
        return answer(lambda: registry.unload(name))

    app.router.add_post("/load_lora_adapter", load)
    app.router.add_post("/unload_lora_adapter", unload)


def _named_adapter(body: dict[str, Any], served_name: str, native: bool) -> str | None:
    """SGLang's native /generate reads `lora_path` only; its OpenAI routes read `model` first."""
    model = None if native else body.get("model")
    if isinstance(model, str) and model != served_name and ":" in model:
        prefix = f"{served_name}:"
        return model[len(prefix) :] if model.startswith(prefix) else model.split(":", 1)[1]
    named = body.get("lora_path")
    if named is None:
        return None
    if not isinstance(named, str) or not named:
        raise ValueError("lora_path must name one loaded adapter (a string)")
    return named


def _check_config(name: str, folder: Path, envelope: LoraEnvelope) -> int:
    """The adapter's rank, after SGLang's load-time checks of its adapter_config.json."""
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as error:
        raise AdapterRefused(
            f"Failed to load LoRA adapter {name}: cannot read {folder / ADAPTER_CONFIG}: {error}"
        ) from None
    if not isinstance(config, dict) or not {"r", "lora_alpha", "target_modules"} <= config.keys():
        raise AdapterRefused(
            f"Failed to load LoRA adapter {name}: {ADAPTER_CONFIG} needs r, lora_alpha and target_modules"
        )
    if str(config.get("peft_type", "LORA")).lower() != "lora":
        raise AdapterRefused(
            f"Failed to load LoRA adapter {name}: peft_type {config['peft_type']} is not LORA"
        )
    if config.get("use_dora"):
        raise AdapterRefused(f"Failed to load LoRA adapter {name}: DoRA adapters are not supported")
    rank, modules = config["r"], config["target_modules"]
    if not isinstance(rank, int) or rank < 1:
        raise AdapterRefused(
            f"Failed to load LoRA adapter {name}: r must be a positive integer, got {rank!r}"
        )
    fits = rank <= envelope.max_rank and (modules in _ALL_MODULES or _modules_fit(modules, envelope))
    if not fits:
        raise AdapterRefused(
            f"LoRA adapter {name} with rank {rank} is incompatible with the current LoRA memory pool "
            "configuration. Please ensure that the LoRA adapter's rank is within the configured "
            "`--max-lora-rank` and that the target modules are included in `--lora-target-modules`."
        )
    return rank


def _modules_fit(modules: object, envelope: LoraEnvelope) -> bool:
    names = [modules] if isinstance(modules, str) else modules
    if not isinstance(names, list) or not all(isinstance(m, str) for m in names):
        return False
    # PEFT may name a module by its full path (model.layers.0.self_attn.q_proj): the last part counts.
    short = [m.rsplit(".", 1)[-1] for m in names]
    if not all(m in LORA_TARGET_NAMES for m in short):
        return False
    return normalized(tuple(LoraTarget(m) for m in short)) <= normalized(envelope.targets)
