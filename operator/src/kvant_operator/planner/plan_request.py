"""How a model is to be served, as the planner reads it: from a QuantizedModel spec (`from_spec`), from
`kvant plan`'s flags, or built by a bench."""

from __future__ import annotations

from dataclasses import dataclass

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_contracts.launch_spec import Device
from kvant_contracts.lora import LoraEnvelope
from kvant_operator.api.spec import QuantizedModelSpec, QuantTargets, WeightFormat

DEFAULT_CONTEXTS = (4096, 32768, 131072)


@dataclass(frozen=True)
class PlanRequest:
    """How the model is to be served. `weights_format` None keeps the source format. On CPU
    (`device` cpu) `gpu_memory_gib` is the engine container's memory and `gpus` is 0."""

    gpu_memory_gib: float
    tensor_parallel: int = 1
    gpus: int | None = None  # GPUs per replica; None = tensor_parallel
    kv_cache_dtype: KvCacheDtype = KvCacheDtype.FP8_E4M3
    weights_format: WeightFormat | None = None
    group_size: int | None = None  # None: weights_recipe's default
    targets: QuantTargets | None = None  # None: weights_recipe's default for the source (MoE or dense)
    ignore: tuple[str, ...] = ()
    mem_fraction_static: float | None = None
    page_size: int = 1
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS
    device: Device = Device.CUDA
    kv_cache_mib: int | None = None  # CPU only: an explicit KV cache size
    lora: LoraEnvelope | None = None  # the adapter pool each engine reserves (spec.serving.lora)

    @classmethod
    def from_spec(cls, spec: QuantizedModelSpec, contexts: tuple[int, ...] = DEFAULT_CONTEXTS) -> PlanRequest:
        serving, weights = spec.serving, spec.weights
        memory = serving.gpu.memory_gib if serving.gpu is not None else 0.0
        if serving.cpu is not None:
            memory = serving.cpu.memory_gib
        return cls(
            device=serving.device,
            kv_cache_mib=serving.cpu.kv_cache_mib if serving.cpu is not None else None,
            gpu_memory_gib=memory,
            tensor_parallel=serving.tensor_parallel,
            gpus=serving.gpus,
            kv_cache_dtype=spec.kv_cache.dtype,
            weights_format=weights.format,
            group_size=weights.group_size,
            targets=weights.targets,
            ignore=tuple(weights.ignore),
            mem_fraction_static=serving.mem_fraction_static,
            page_size=serving.page_size,
            contexts=contexts,
            lora=serving.lora.envelope() if serving.lora is not None else None,
        )
