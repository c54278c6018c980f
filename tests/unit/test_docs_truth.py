"""The documentation says what the code does.

Two claims a reader acts on are checked against the source: which deployables read each
variable of the spec's configuration table (``docs/configuration.md``, "Used by"), and which
modules ``docs/architecture.md`` calls pure (each must be held to it by the import-linter
contract in ``pyproject.toml``).
"""

from __future__ import annotations

import re
import tomllib

from shared.config import Settings
from tests.unit._code_reads import DEPLOYABLES, ROOT, settings_read_by

PURE_CONTRACT = "Pure modules import no I/O library"


def _spec_table_rows() -> list[tuple[list[str], str]]:
    """(variables, "Used by" cell) for each row of the spec's table in configuration.md."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split("## The spec's table", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        rows.append((re.findall(r"`([A-Z0-9_]+)`", cells[0]), cells[2]))
    return rows


def _used_by(cell: str) -> tuple[set[str], set[str]]:
    """("now", "planned") deployables named in a "Used by" cell."""
    if cell == "all":
        return set(DEPLOYABLES), set()
    now: set[str] = set()
    planned: set[str] = set()
    for part in (p.strip() for p in cell.split(",")):
        name, _, note = part.partition(" ")
        assert name in DEPLOYABLES, f"unknown deployable {name!r} in {cell!r}"
        (planned if note == "(planned)" else now).add(name)
    return now, planned


def test_the_spec_table_names_every_deployable_that_reads_each_variable() -> None:
    rows = _spec_table_rows()
    assert len(rows) > 15
    wrong = {}
    for variables, cell in rows:
        now, planned = _used_by(cell)
        for variable in variables:
            assert variable in Settings.model_fields, f"{variable} is not a setting"
            actual = settings_read_by().get(variable, set())
            if actual != now:
                wrong[variable] = {"documented": sorted(now), "read by": sorted(actual)}
            assert not (actual & planned), f"{variable}: read today by {actual & planned}"
    assert wrong == {}


def test_every_module_the_architecture_page_calls_pure_is_held_to_it() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(
        c for c in pyproject["tool"]["importlinter"]["contracts"] if c["name"] == PURE_CONTRACT
    )
    held = set(contract["source_modules"])
    claimed = set()
    for package, table in re.findall(
        r"Pure modules of `(\w+)`[^\n]*\n\n((?:\|[^\n]*\n)+)", text
    ) + re.findall(r"## The (\w+)\n\nPure modules[^\n]*\n\n((?:\|[^\n]*\n)+)", text):
        for row in table.splitlines()[2:]:
            first = row.strip("|").split("|")[0]
            claimed |= {
                f"{package}.{name.replace('/', '.')}"
                for name in re.findall(r"`([\w/]+)\.py`", first)
            }
    assert claimed, "the architecture page lists no pure modules"
    assert sorted(claimed - held) == []
