from decimal import Decimal

import pytest

from vkpy.core.quantity import QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1Gi", Decimal(2**30)),
        ("128Mi", Decimal(128 * 2**20)),
        ("1.5G", Decimal("1.5e9")),
        ("2e3", Decimal(2000)),
        ("100n", Decimal("1e-7")),
        (3, Decimal(3)),
    ],
)
def test_parses_kubernetes_quantities(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Xi", "1 Gi", "1mi", "--1"])
def test_rejects_what_kubernetes_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("24683584Ki", Decimal(24683584 * 1024)), ("1Ki", Decimal(1024)), ("3k", Decimal(3000))],
)
def test_kibibytes_as_nodes_report_memory(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1K", "1ki"])
def test_a_capital_k_only_with_i(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)
