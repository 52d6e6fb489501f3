"""One registry of weight formats: the API, the converter and the launcher accept exactly its names."""

from __future__ import annotations

import pytest

from kvant_contracts.launch_spec import LaunchSpec, SpecError
from kvant_contracts.weight_formats import FORMATS, UnknownWeightFormat, converted_formats, weight_format
from kvant_operator.api.spec import WeightFormat
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.convert import recipe
from kvant_runtime.launch.argv import quantization_flag


def test_the_api_enum_is_the_registry() -> None:
    # The enum stays explicit for the CRD generator and the type checker; it may not drift.
    assert [f.value for f in WeightFormat] == list(FORMATS)


def test_the_converter_makes_exactly_the_converted_formats() -> None:
    assert converted_formats() == ("int4",)
    for name in FORMATS:
        if name in converted_formats():
            assert recipe.Recipe(format=name).format == name
        else:
            with pytest.raises(CheckpointError, match=f"--format '{name}' is not supported; valid: int4"):
                recipe.Recipe(format=name)


@pytest.mark.parametrize("name", list(FORMATS))
def test_the_launcher_checks_each_format_against_its_quant_methods(name: str) -> None:
    fmt = weight_format(name)
    for method in fmt.quant_methods:
        flags = quantization_flag(name, method)
        assert flags == (
            ["--quantization", fmt.online_quantization] if method is None and fmt.online_quantization else []
        )
    with pytest.raises(SpecError, match=f"weightsFormat is {name}, but the checkpoint's config.json has"):
        quantization_flag(name, "awq")
    assert LaunchSpec("/m", "m", name).weightsFormat == name


def test_an_unknown_format_names_the_valid_ones() -> None:
    with pytest.raises(UnknownWeightFormat, match="valid: bf16, fp8, int4"):
        weight_format("nvfp4")
    with pytest.raises(SpecError, match="weightsFormat must be one of bf16, fp8, int4"):
        LaunchSpec("/m", "m", "nvfp4")
