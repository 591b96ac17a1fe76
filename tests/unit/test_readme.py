"""Every README and docs/*.md command is run as written: by an e2e scenario, by .ci/run,
or (a convenience) checked to be the command it stands for; tests/readme.py says which."""

import re
from pathlib import Path

import pytest

from tests.readme import DOCS, INSTALL, PLACES, ROOT, commands

pytestmark = pytest.mark.unit


def documented() -> dict[str, list[str]]:
    """Each doc with a ```sh command -> its commands."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = {str(d.relative_to(ROOT)): commands(d) for d in docs}
    return {doc: lines for doc, lines in found.items() if lines}


@pytest.mark.parametrize("doc", sorted(documented()))
def test_every_docs_command_has_a_place_that_runs_it(doc: str) -> None:
    found, table = documented()[doc], DOCS.get(doc, {})
    assert len(found) == len(set(found)), f"a command appears twice in {doc}"
    assert [c for c in found if c not in table] == [], f"{doc}: commands no test runs"
    assert [c for c in table if c not in found] == [], f"commands no longer in {doc}"


def test_the_table_names_only_docs_with_commands_and_places_that_exist() -> None:
    assert sorted(DOCS) == sorted(documented())
    named = {place for table in DOCS.values() for place in table.values()}
    assert named - set(PLACES) == set(), "places PLACES does not say where they are"
    for where in PLACES.values():
        path, _, test = where.partition("::")
        source = (ROOT / path).read_text()
        assert not test or re.search(rf"^(async )?def {test}\(", source, re.M), where


def test_commands_joins_a_continued_line_as_the_shell_does(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```sh\nkubectl create secret generic x \\\n  --from-file=a   # the seed\n"
        "# a comment\nbaton status    # once\n```\n```text\nnot a command\n```\n"
    )
    assert commands(doc) == ["kubectl create secret generic x --from-file=a", "baton status"]


def test_ci_runs_its_commands_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    for table in DOCS.values():
        for command, where in table.items():
            if where.startswith("ci"):
                assert command in ci, command
    assert INSTALL in ci
    assert "promtool check rules deploy/prometheus/rules.yaml" in ci


def test_just_chaos_is_the_chaos_run() -> None:
    """`just chaos` (docs/reliability.md) is not run again in the suite: its recipe is
    `python -m tests.chaos` with the venv's Python, which test_chaos.py runs as written."""
    justfile = (ROOT / "Justfile").read_text()
    recipe = re.search(r"^chaos\b[^\n]*:[^\n]*\n((?:[ \t]+[^\n]*\n)+)", justfile, re.M)
    assert recipe is not None, "no chaos recipe in the Justfile"
    assert recipe.group(1).split() == ["{{venv}}python", "-m", "tests.chaos", "{{ARGS}}"]
    assert 'venv := ".venv/bin/"' in justfile
    assert DOCS["docs/reliability.md"]["just chaos"] == "just"
