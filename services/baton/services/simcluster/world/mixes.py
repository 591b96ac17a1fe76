"""Generated job mixes shaped like published cluster statistics.

``llm_mix`` is Acme's Kalos cluster as Hu et al. (NSDI '24) describe it: evaluation
jobs are most jobs but a sliver of GPU time; pretraining gangs of 256-1,024 GPUs hold
most of it. ``tests/bench/bench_scheduling.py`` runs it as published (256 nodes, 72 h);
``baton sim --trace llm`` sizes it to the cluster (``llm_jobs``).
"""

from __future__ import annotations

import math
import random

from baton.services.simcluster.world.workload import Job

KALOS_GPUS = 2048  # the cluster the published mix is sized for: 256 nodes of 8 GPUs
# (kind, jobs on KALOS_GPUS, GPU counts to choose from, median duration s)
LLM_KINDS: tuple[tuple[str, int, tuple[int, ...], float], ...] = (
    ("eval", 2000, (1, 1, 2, 4, 8, 8), 15 * 60),
    ("tune", 160, (16, 32, 64, 128), 2 * 3600),
    ("pretrain", 20, (256, 512, 512, 1024), 10 * 3600),
)
TEAMS = 6


def llm_mix(
    seed: int = 7, hours: float = 72.0, *, scale: float = 1.0, max_gpus: int | None = None
) -> list[Job]:
    """Kalos-like: ~90% of jobs are evaluation (1-8 GPUs, median ~15 min), a few
    fine-tuning/debug gangs (16-128 GPUs, ~2 h), and pretraining gangs of 256-1,024 GPUs
    (~10 h); lognormal durations (sigma 0.8, at most 48 h), uniform arrivals over the
    first 90% of ``hours``, teams ``0``..``5``. ``scale`` multiplies every kind's count
    (at least one each); ``max_gpus`` caps a job's GPUs (a cluster's size). Job ids are
    ``<kind><i>``; sorted by submit time."""
    if scale <= 0 or hours <= 0:
        raise ValueError(f"llm_mix: scale and hours must be > 0, got {scale}, {hours}")
    rng = random.Random(seed)
    window = hours * 3600
    drawn: list[tuple[str, float, int, float]] = []
    for kind, count, sizes, median_s in LLM_KINDS:
        for i in range(max(1, round(count * scale))):
            duration = min(rng.lognormvariate(math.log(median_s), 0.8), 48 * 3600)
            at = rng.uniform(0, window * 0.9)
            drawn.append((f"{kind}{i}", at, rng.choice(sizes), duration))
    teams = random.Random(seed + 1)  # its own stream: the jobs do not depend on it
    jobs = [
        Job(job_id=name, submit_s=at, gpus=min(gpus, max_gpus or gpus), duration_s=duration,
            team=str(teams.randrange(TEAMS)))
        for name, at, gpus, duration in drawn
    ]  # fmt: skip
    return sorted(jobs, key=lambda j: (j.submit_s, j.job_id))


def llm_jobs(*, seed: int, gpus: int, hours: float = 72.0) -> list[Job]:
    """``llm_mix`` sized to a cluster of ``gpus`` GPUs: as many jobs of each kind per GPU
    as the published mix has (offered load about the same, ~106%), none larger than the
    cluster."""
    if gpus <= 0:
        raise ValueError(f"llm_jobs: gpus must be > 0, got {gpus}")
    return llm_mix(seed, hours, scale=gpus / KALOS_GPUS, max_gpus=gpus)
