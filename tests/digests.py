"""Test helper: the release variants of a run compared with the releases' recorded digests.

Moved here from the release fetch, which never used it: the tests check with it that a
run's ``file_sha256`` of each release is the digest this host recorded when it fetched
that release (``kvqueue.sources.release_cache.read_record``), and that committed runs agree
with one another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kvqueue.sources.fetch_errors import CacheMismatch
from kvqueue.sources.release_cache import read_record
from kvqueue.sources.versions import is_version


@dataclass(frozen=True)
class DigestCheck:
    """A release variant of a run compared with the release's recorded digest.

    Attributes
    ----------
    label
        The variant's label in the run.
    vllm_version
        Its release.
    run_sha256
        ``file_sha256`` the run recorded.
    recorded_sha256
        The release's recorded digest, or None when none is known here.
    """

    label: str
    vllm_version: str
    run_sha256: str
    recorded_sha256: str | None

    @property
    def status(self) -> Literal["match", "mismatch", "unrecorded"]:
        """``match``, ``mismatch`` (the run measured another file) or ``unrecorded``."""
        if self.recorded_sha256 is None:
            return "unrecorded"
        return "match" if self.recorded_sha256 == self.run_sha256 else "mismatch"

    @property
    def message(self) -> str:
        """One line describing the outcome."""
        if self.status == "match":
            return f"{self.label}: file_sha256 is vllm=={self.vllm_version}'s"
        if self.status == "unrecorded":
            return f"{self.label}: no digest of vllm=={self.vllm_version} is recorded here"
        return (
            f"{self.label}: measured a file that is not vllm=={self.vllm_version}'s: "
            f"sha256 expected {self.recorded_sha256}, got {self.run_sha256}"
        )


def check_run_digests(
    variants: Iterable[Mapping[str, Any]],
    records: Mapping[str, str] | None = None,
) -> list[DigestCheck]:
    """Compare the release variants of a run with the releases' recorded digests.

    Parameters
    ----------
    variants
        The ``variants`` list of a ``data/raw/<host>/<run>/run.json``; entries whose
        ``vllm_version`` is null (files, git, kvqueue) are skipped.
    records
        Known digests, ``{version: file_sha256}``; by default each release's
        ``record.json`` in this host's cache (a missing or unreadable record gives
        ``unrecorded``, never an error, so a report can always be built).

    Returns
    -------
    list of DigestCheck
        One per release variant, in the run's order.
    """
    checks = []
    for variant in variants:
        version = variant.get("vllm_version")
        if not version:
            continue
        if records is not None:
            expected = records.get(version)
        else:
            try:
                record = read_record(version) if is_version(version) else None
            except CacheMismatch:
                record = None
            expected = record.file_sha256 if record else None
        checks.append(
            DigestCheck(
                label=str(variant.get("label", f"vllm=={version}")),
                vllm_version=version,
                run_sha256=str(variant.get("file_sha256", "")),
                recorded_sha256=expected,
            )
        )
    return checks
