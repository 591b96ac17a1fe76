"""Reading a Philly-format job trace.

Columns: ``job_id,submit_time,submit_s,num_gpus,duration_s,vc,user,status`` (the
condensed form of the Microsoft Philly trace kept by the Pollux artifact; see
``data/README.md``). Only ``job_id``, ``submit_s``, ``num_gpus``, ``duration_s`` and
``vc`` are used. A bad row raises :class:`TraceError` naming the line and column.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path

import msgspec

from baton.services.simcluster.world.workload import Job

COLUMNS = ("job_id", "submit_s", "num_gpus", "duration_s", "vc")
_TOKEN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class TraceError(ValueError):
    """The trace file is malformed; the message names the line and column."""


def sample_path() -> Path:
    """The bundled sample: the first 2,000 jobs of the Philly trace."""
    return Path(str(resources.files("baton.services.simcluster") / "data" / "philly-sample.csv"))


def read(path: Path, *, limit: int | None = None) -> list[Job]:
    try:
        with path.open(newline="") as f:
            return list(parse(f, limit=limit, source=str(path)))
    except OSError as exc:
        raise TraceError(f"{path}: {exc}") from None


def parse(
    lines: Iterable[str], *, limit: int | None = None, source: str = "trace"
) -> Iterator[Job]:
    reader = csv.DictReader(lines)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceError(f"{source}: line 1: missing columns {', '.join(missing)}")
    for count, row in enumerate(reader):
        if limit is not None and count >= limit:
            return
        yield _job(row, where=f"{source}: line {reader.line_num}")


def _job(row: dict[str, str], *, where: str) -> Job:
    def number(column: str) -> float:
        try:
            value = float(row[column])
        except (TypeError, ValueError):
            raise TraceError(f"{where}: {column}: not a number: {row[column]!r}") from None
        if value < 0:
            raise TraceError(f"{where}: {column}: negative: {row[column]!r}")
        return value

    job_id = (row["job_id"] or "").strip().lower()
    team = (row["vc"] or "").strip().lower()
    for column, value in (("job_id", job_id), ("vc", team)):
        if not _TOKEN.match(value) or len(value) > 40:
            raise TraceError(f"{where}: {column}: not usable in a name: {value!r}")
    gpus = number("num_gpus")
    if gpus < 1 or gpus != int(gpus):
        raise TraceError(f"{where}: num_gpus: expected a whole number >= 1: {row['num_gpus']!r}")
    return Job(
        job_id=job_id,
        submit_s=number("submit_s"),
        gpus=int(gpus),
        duration_s=number("duration_s"),
        team=team,
    )


def from_busy_start(
    jobs: Iterable[Job], *, window_s: float = 3600.0, min_jobs: int = 20
) -> list[Job]:
    """The trace from its first busy hour on, with the cluster as the trace had it then.

    Real traces often start with a long quiet stretch (the bundled Philly sample has 76
    jobs in its first 20 days, then 1,500 in a day). The replay starts at the first job
    with ``min_jobs`` more within ``window_s``: jobs submitted before then and still
    running are submitted at once with what remains of their duration, finished ones are
    dropped, and later submit times move earlier by the skipped span. A trace that is
    never that busy is returned as it is.
    """
    ordered = sorted(jobs, key=lambda j: j.submit_s)
    times = [j.submit_s for j in ordered]
    start = next(
        (
            t
            for i, t in enumerate(times)
            if i + min_jobs < len(times) and times[i + min_jobs] - t <= window_s
        ),
        None,
    )
    if start is None or start <= (times[0] if times else 0.0):
        return ordered
    out: list[Job] = []
    for job in ordered:
        if job.submit_s >= start:
            out.append(msgspec.structs.replace(job, submit_s=round(job.submit_s - start, 3)))
        elif job.submit_s + job.duration_s > start:
            left = round(job.submit_s + job.duration_s - start, 3)
            out.append(msgspec.structs.replace(job, submit_s=0.0, duration_s=left))
    return sorted(out, key=lambda j: j.submit_s)
