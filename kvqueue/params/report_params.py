"""The settings of the analysis (``make report``, the report notebook's parameters):
:class:`ReportSettings`, the label pairs compared by default, the notebook's folders, and
the report notebook's ``parameters`` cell.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from kvqueue.errors import BenchInputError
from kvqueue.params import spec
from kvqueue.params.spec import param

DEFAULT_PAIRS: tuple[tuple[str, str], ...] = (
    ("vllm==0.32.0", "vllm==0.31.0"),  # the upstream change
    ("kvqueue", "vllm==0.32.0"),  # our queue against current upstream
    # The pool subject (labels pool:SOURCE): the pool's own change across the releases,
    # and our queue as the newest pool sees it (the same pool with its own queue).
    ("pool:vllm==0.33.0", "pool:vllm==0.31.0"),
    ("pool:vllm==0.33.0+queue=kvqueue", "pool:vllm==0.33.0"),
)


#: The fields of :class:`ReportSettings` that choose runs (the scope), not how they are
#: analysed: a run's cached analysis does not depend on them.
SCOPE_FIELDS = ("hosts", "runs")


@dataclass(frozen=True)
class ReportSettings:
    """Analysis settings of ``make report`` (the report notebook's parameters).

    Attributes
    ----------
    pairs
        ``(candidate, baseline)`` label pairs compared wherever a run has both.
    confidence
        CI level.
    resamples
        Bootstrap resamples (>= 10,000 for the report).
    seed
        Seed of every bootstrap call.
    delta
        Equivalence band of the verdict (fraction).
    method
        scipy bootstrap method.
    kv_regions
        KV regions per block on one rank for the policy's net line (0, only ever the
        default: as each run recorded; ``KV_REGIONS=0`` is refused by :func:`from_text`).
    hosts, runs
        The report's scope: only these host labels / run ids (empty: every run found).
    """

    pairs: tuple[tuple[str, str], ...] = param(
        DEFAULT_PAIRS,
        None,
        "(candidate, baseline) label pairs compared wherever a run has both",
        "pairs",
    )
    confidence: float = param(0.95, None, "confidence level of the CIs", "float")
    resamples: int = param(10_000, None, "bootstrap resamples", "int")
    seed: int = param(20261129, None, "seed of every bootstrap call", "int")
    delta: float = param(
        0.01, None, "no-change band of the verdict, a fraction (0.01: ±1 percent)", "float"
    )
    method: str = param(
        "hettmansperger-sheather",
        None,
        "CI of the reductions: hettmansperger-sheather (interpolated order-"
        "statistic interval of the median; 94-97% measured coverage), or a "
        "scipy.stats.bootstrap method (percentile, basic, BCa) to bootstrap the median",
    )
    kv_regions: int = param(
        0,
        "KV_REGIONS",
        "KV regions per block on one rank that prices a policy's descriptors, 1 or more (unset: "
        "each run's recorded value; 64 for runs before it was recorded)",
        "int",
    )
    hosts: tuple[str, ...] = param(
        (),
        "HOSTS",
        "report only the runs of these host labels, space-separated (empty: every host)",
        "words",
    )
    runs: tuple[str, ...] = param(
        (),
        "RUNS",
        "report only these run ids, space-separated (empty: every run)",
        "words",
    )

    def __post_init__(self) -> None:
        # A region count prices a policy's descriptors: a negative or fractional one
        # would print a net line in no unit at all.
        if isinstance(self.kv_regions, bool) or not isinstance(self.kv_regions, int):
            raise BenchInputError(f"KV_REGIONS must be a whole number, got {self.kv_regions!r}")
        if self.kv_regions < 0:
            raise BenchInputError(
                f"KV_REGIONS must be >= 0 (0: as each run recorded), got {self.kv_regions}"
            )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ReportSettings:
        """Build settings from JSON-like values (lists become tuples)."""
        values = dict(values)
        if "pairs" in values and not values["pairs"]:
            del values["pairs"]  # [] in the notebook: the default pairs
        if "pairs" in values:
            values["pairs"] = tuple((str(c), str(b)) for c, b in values["pairs"])
        for name in SCOPE_FIELDS:
            if name in values:
                values[name] = tuple(str(v) for v in values[name])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-ready values."""
        out = asdict(self)
        out["pairs"] = [list(p) for p in self.pairs]
        for name in SCOPE_FIELDS:
            out[name] = list(out[name])
        return out

    def bootstrap(self) -> dict[str, Any]:
        """Keyword arguments for the :mod:`kvqueue.stats.paired_stats` bootstrap functions."""
        return {
            "confidence": self.confidence,
            "resamples": self.resamples,
            "seed": self.seed,
            "method": self.method,
        }


#: The report notebook's folder parameters (paths relative to the repository root).
REPORT_PATHS: dict[str, tuple[str, str]] = {
    "raw_dir": ("data/raw", "raw runs to read (relative paths: to the repository root)"),
    "processed_dir": ("data/processed", "where the processed tables are (re)built"),
    "figures_dir": ("reports/figures", "where the figures are written"),
}


def report_fields() -> list[Any]:
    """The fields of :class:`ReportSettings`, in order."""
    return list(fields(ReportSettings))


def from_text(given: Mapping[str, Any]) -> ReportSettings:
    """Settings from option texts keyed by field name (``None``: the default); ``pairs``
    comes as ``[candidate, baseline]`` lists (``None`` or empty: the default pairs).

    Raises
    ------
    BenchInputError
        An unknown name, the first text that does not parse, or ``KV_REGIONS`` below 1.
    """
    texts = {k: v for k, v in given.items() if k != "pairs"}
    values = spec.parse_texts([f for f in report_fields() if f.name != "pairs"], texts)
    regions = values.get("kv_regions")
    if regions is not None and not isinstance(regions, bool) and regions < 1:
        # 0 is the field's "unset": given, it was replaced by each run's value (64) and
        # the Reproduce block said 64.
        raise BenchInputError(
            f"KV_REGIONS must be a whole number >= 1 (leave it unset to price each run at "
            f"the value it recorded), got {regions}"
        )
    if given.get("pairs"):
        values["pairs"] = given["pairs"]
    return ReportSettings.from_dict(values)


def report_parameters_cell() -> str:
    """The source of ``notebooks/report.ipynb``'s ``parameters`` cell, from the fields."""
    lines = [
        "# Parameters (papermill). Generated from kvqueue.params.report_params.ReportSettings and "
        "REPORT_PATHS: edit there, then `make notebooks`."
    ]
    for name, (default, help_) in REPORT_PATHS.items():
        lines.append(spec.cell_line(name, "str", default, help_))
    lines += [spec.field_cell_line(f) for f in report_fields()]
    return "\n".join(lines)
