"""``python -m tests.chaos``'s options: a --keep folder that holds an earlier run is
refused in one line, exit 2, before anything starts (it was a FileExistsError
traceback: the run makes its logs/ and js/ there)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.chaos.__main__ import main

pytestmark = pytest.mark.unit


def test_a_keep_folder_with_an_earlier_run_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "logs").mkdir()
    monkeypatch.setattr(sys, "argv", ["python -m tests.chaos", "--keep", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert f"--keep {tmp_path}: holds an earlier run" in capsys.readouterr().err
