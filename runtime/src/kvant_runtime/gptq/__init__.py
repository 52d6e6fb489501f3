"""GPTQ (Frantar et al. 2022) for `kvant convert --method gptq`: calibrated, error-compensating INT4 rounding.

The package rounds each targeted Linear weight of a checkpoint with GPTQ, layer by layer, and stages
the rounded tensors under the output's staging folder; the ordinary converter then writes the artifact
from them (see `kvant_runtime.convert.shard`). Importing the package loads no torch: only `model_pass`
and the modules it uses do, so an RTN conversion stays torch-free.
"""
