"""The prometheus-adapter rule the docs show is the one kvant_contracts.autoscaling defines."""

from __future__ import annotations

from pathlib import Path

import yaml

from kvant_contracts.autoscaling import adapter_rule

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "autoscaling.md"


def test_the_documented_rule_is_the_contract_rule() -> None:
    text = PAGE.read_text()
    block = text.split("<!-- adapter-rule:start -->", 1)[1].split("<!-- adapter-rule:end -->", 1)[0]
    shown = yaml.safe_load(block.strip().removeprefix("```yaml").removesuffix("```"))
    assert shown == {"rules": [adapter_rule()]}, (
        f"{PAGE} shows a stale rule; paste: {yaml.safe_dump({'rules': [adapter_rule()]}, width=1000)}"
    )
