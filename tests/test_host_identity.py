"""One HOST label, one CPU (issue 26, item 3): ``run.json`` records the CPU identity
(:func:`kvqueue.hostinfo.cpu_identity`) and the report keeps runs of two identities under
one label apart (:func:`kvqueue.ab.ab_analysis.host_cpus`).

Runs are written by tests/synthetic.py; the ``/proc/cpuinfo`` texts are fixtures written
here (abridged from an Intel Xeon VM and an Arm Neoverse machine).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from synthetic import write_run

from kvqueue import __main__ as cli
from kvqueue import hostinfo
from kvqueue.ab import ab_analysis
from kvqueue.params import report_params
from kvqueue.rawdata import git_state, raw_reader
from kvqueue.report import processed_build, provenance

FAST = report_params.ReportSettings(resamples=2000)
#: The full protocol (every case, both pools, MIN_PROCESSES processes), small otherwise:
#: only full-protocol runs compete for the headline.
FULL = {"processes": 6, "confirm_processes": 0, "samples": 2}
XEON = "Intel(R) Xeon(R) Processor"
#: The CPU of the committed xeon-vm-2core runs; the latest machine differs in model only.
CPU_207 = {
    "vendor": "GenuineIntel",
    "family": 6,
    "model": 207,
    "stepping": 2,
    "cache_size": "107520 KB",
    "flags_sha256": "a" * 64,
    "caches": {"L1d": "48K", "L1i": "32K", "L2": "2048K", "L3": "107520K"},
}
CPU_167 = {**CPU_207, "model": 167}
OLDER, NEWER = "20261128T090000Z-cp312-aaaa", "20261129T090000Z-cp312-bbbb"


def _two_runs(raw: Path, first: dict[str, Any], second: dict[str, Any]) -> None:
    """Two full-protocol runs of one interpreter under host label ``box``, a day apart."""
    write_run(raw, host="box", run_id=OLDER, started_at="2026-11-28T09:00:00+00:00", **first)
    write_run(
        raw, host="box", run_id=NEWER, started_at="2026-11-29T09:00:00+00:00", seed=2, **second
    )


def _runs(raw: Path) -> pd.DataFrame:
    checked = git_state.with_git_state(raw_reader.read_raw(raw), None)
    return ab_analysis.runs_table(checked).set_index("run_id")


# ---------------------------------------------------------------------------------------
# the report


def test_two_cpu_models_under_one_label_are_named_and_kept_apart(tmp_path: Path) -> None:
    """The issue's "done when": run.json differing only in cpu.model -> named, not pooled."""
    raw = tmp_path / "raw"
    _two_runs(
        raw,
        {"cpu_model": XEON, "cpu": CPU_207, **FULL},
        {"cpu_model": XEON, "cpu": CPU_167, **FULL},
    )
    data = processed_build.build(raw, tmp_path / "processed", FAST)
    runs = data.runs.set_index("run_id")

    # Named: every run of the label carries the warning, which names both CPUs.
    warning = runs.loc[OLDER, "warnings"]
    assert warning == runs.loc[NEWER, "warnings"]
    assert warning.startswith("host label box holds runs on 2 CPUs, kept apart: ")
    assert "box = Intel(R) Xeon(R) Processor [GenuineIntel family 6 model 207 stepping 2" in warning
    assert (
        "box#2 = Intel(R) Xeon(R) Processor [GenuineIntel family 6 model 167 stepping 2" in warning
    )
    assert warning.endswith("in 1 run")

    # Kept apart: each CPU has its own headline run (the newer CPU does not displace the
    # older one's), and each run's note says which CPU it is on.
    assert runs["headline"].tolist() == [True, True]
    assert runs.loc[OLDER, "note"] == "headline; CPU box"
    assert runs.loc[NEWER, "note"] == "headline; CPU box#2"
    heads = data.summary[data.summary["headline"]]
    assert set(heads["run_id"]) == {OLDER, NEWER}
    assert set(data.ledger.set_index("run_id").loc[[OLDER, NEWER], "use"]) == {"headline"}

    # The machines table shows both, one column each (not one hiding the other).
    env = provenance.environment_table(data)
    assert list(env.columns) == ["Field", "box · CPython 3.12.1", "box#2 · CPython 3.12.1"]
    assert env.set_index("Field").loc["Run"].tolist() == [OLDER, NEWER]


def test_runs_without_cpu_fields_and_one_model_name_stay_one_host(tmp_path: Path) -> None:
    """Runs recorded before machine.cpu: grouped by model name, as before."""
    _two_runs(tmp_path, {"cpu_model": XEON, **FULL}, {"cpu_model": XEON, **FULL})
    runs = _runs(tmp_path)
    assert runs["warnings"].isna().all()
    assert runs.loc[NEWER, "note"] == "headline"
    assert runs.loc[OLDER, "note"] == "older run (not in the headline tables)"


def test_identical_identities_stay_one_host(tmp_path: Path) -> None:
    _two_runs(
        tmp_path,
        {"cpu_model": XEON, "cpu": CPU_207, **FULL},
        {"cpu_model": XEON, "cpu": dict(CPU_207), **FULL},
    )
    runs = _runs(tmp_path)
    assert runs["warnings"].isna().all()
    assert runs["headline"].tolist() == [False, True]


def test_old_runs_on_two_model_names_keep_their_wording_and_are_kept_apart(
    tmp_path: Path,
) -> None:
    _two_runs(tmp_path, {"cpu_model": XEON, **FULL}, {"cpu_model": "AMD EPYC", **FULL})
    runs = _runs(tmp_path)
    assert runs.loc[OLDER, "warnings"] == (
        f"host label box has runs on 2 CPU models: AMD EPYC (1 run), {XEON} (1 run)"
    )
    assert runs.loc[OLDER, "note"] == "headline; CPU box"
    assert runs.loc[NEWER, "note"] == "headline; CPU box#2"


def test_an_old_run_and_a_new_one_of_one_model_name_are_kept_apart(tmp_path: Path) -> None:
    """The committed xeon-vm-2core case: old runs name the model only, a new one carries
    its identity; nothing shows that they are one CPU, so they are not pooled."""
    _two_runs(tmp_path, {"cpu_model": XEON, **FULL}, {"cpu_model": XEON, "cpu": CPU_167, **FULL})
    runs = _runs(tmp_path)
    assert f"box = {XEON} [model name only] in 1 run" in runs.loc[NEWER, "warnings"]
    assert runs["headline"].tolist() == [True, True]


def test_cpus_are_numbered_by_first_appearance_oldest_first(tmp_path: Path) -> None:
    # The older run (written second, so later in folder order) names the label's first CPU.
    write_run(
        tmp_path, host="box", run_id="20261130T090000Z-cp312-zzzz", cpu_model=XEON, cpu=CPU_167
    )
    write_run(
        tmp_path,
        host="box",
        run_id="20261129T090000Z-cp312-yyyy",
        started_at="2026-11-27T09:00:00+00:00",
        seed=2,
        cpu_model=XEON,
        cpu=CPU_207,
    )
    keys, warnings = ab_analysis.host_cpus(raw_reader.read_raw(tmp_path))
    assert keys == {
        ("box", "20261129T090000Z-cp312-yyyy"): "box",
        ("box", "20261130T090000Z-cp312-zzzz"): "box#2",
    }
    assert list(warnings) == ["box"]


def test_host_key_of_reads_the_note_tag() -> None:
    assert ab_analysis.host_key_of("box", "headline; CPU box#2") == "box#2"
    assert ab_analysis.host_key_of("box", "headline") == "box"
    assert ab_analysis.host_key_of("box", pd.NA) == "box"
    # Only a tag of the row's own label counts.
    assert ab_analysis.host_key_of("box", "headline; CPU other#2") == "box"


# ---------------------------------------------------------------------------------------
# recording: /proc/cpuinfo and sysfs

XEON_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 167
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 1
microcode\t: 0x1
cpu MHz\t\t: 2893.202
cache size\t: 16384 KB
flags\t\t: fpu vme sse sse2 avx avx2
bugs\t\t: spectre_v1

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 167
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 1
cache size\t: 16384 KB
flags\t\t: avx2 avx fpu vme sse sse2
"""

ARM_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm sve
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 1

processor\t: 1
Features\t: fp asimd evtstrm sve
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 0
"""


def test_parse_cpuinfo_reads_the_x86_identity() -> None:
    flags = hashlib.sha256(b"avx avx2 fpu sse sse2 vme").hexdigest()
    assert hostinfo.parse_cpuinfo(XEON_CPUINFO) == {
        "vendor": "GenuineIntel",
        "family": 6,
        "model": 167,  # not "model name"
        "stepping": 1,
        "cache_size": "16384 KB",
        "flags_sha256": flags,  # sorted, distinct: the order of the flags does not count
    }


def test_parse_cpuinfo_reads_arm_and_joins_what_differs_between_cores() -> None:
    info = hostinfo.parse_cpuinfo(ARM_CPUINFO)
    assert info == {
        "vendor": "0x41",
        "family": 8,
        "model": "0xd4f,0xd40",
        "stepping": "r0p1,r1p0",
        "flags_sha256": hashlib.sha256(b"asimd evtstrm fp sve").hexdigest(),
    }


def test_parse_cpuinfo_of_nothing_is_empty() -> None:
    assert hostinfo.parse_cpuinfo("") == {}


def test_cache_sizes_reads_sysfs(tmp_path: Path) -> None:
    for i, (level, kind, size) in enumerate(
        [("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K")]
    ):
        d = tmp_path / f"index{i}"
        d.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (d / name).write_text(value + "\n")
    assert hostinfo.cache_sizes(str(tmp_path)) == {"L1d": "48K", "L1i": "32K", "L2": "2048K"}
    assert hostinfo.cache_sizes(str(tmp_path / "none")) is None


def test_machine_info_keeps_cpu_model_beside_the_identity() -> None:
    machine = hostinfo.machine_info()
    assert "cpu_model" in machine and isinstance(machine["cpu"], dict)
    assert set(machine["cpu"]) <= set(hostinfo.CPU_IDENTITY_FIELDS)


def test_labels_that_differ_only_in_case_are_flagged(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_run(raw, host="grace", run_id="20261129T100000Z-cp312-0001", processes=5)
    write_run(raw, host="Grace", run_id="20261129T110000Z-cp312-0002", processes=5, seed=2)
    runs = ab_analysis.runs_table(raw_reader.read_raw(raw))
    for warning in runs["warnings"]:
        assert "host labels Grace, grace differ only in case" in str(warning)


# ---------------------------------------------------------------------------------------
# every kind of run: one numbering of a label's CPUs, kept apart in every question

RAW = Path(__file__).resolve().parent.parent / "data" / "raw"
#: Committed runs copied under the label ``box`` (their files are sealed; run.json's
#: machine record is not).
POLICY_SRC = "xeon-vm-2core/20261201T195852Z-policy-cp311-bef4"
COUNTS_SRC = "xeon-vm-2core/20261201T180338Z-counts-cp311-ce4b"


def _copy_as(raw: Path, src: str, run_id: str, started: str, cpu: dict[str, Any]) -> str:
    """A committed run copied as ``box/<run_id>``, started at ``started`` on ``cpu``."""
    target = raw / "box" / run_id
    shutil.copytree(RAW / src, target)
    meta = json.loads((target / "run.json").read_text(encoding="utf-8"))
    meta.update(host="box", run_id=run_id, started_at=started)
    meta["machine"] = {**meta["machine"], "cpu_model": XEON, "cpu": cpu}
    (target / "run.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return run_id


def _two_copies(raw: Path, src: str, kind: str, second_cpu: dict[str, Any]) -> tuple[str, str]:
    older = _copy_as(raw, src, f"20261128T090000Z-{kind}-cp311-aaaa", "2026-11-28T09:00:00+00:00",
                     CPU_207)  # fmt: skip
    newer = _copy_as(raw, src, f"20261129T090000Z-{kind}-cp311-bbbb", "2026-11-29T09:00:00+00:00",
                     second_cpu)  # fmt: skip
    return older, newer


@pytest.mark.parametrize(("src", "kind", "table"), [
    (POLICY_SRC, "policy", "policy"),
    (COUNTS_SRC, "counts", "count_pairs"),
])  # fmt: skip
def test_two_cpus_of_one_label_are_both_shown_for_policy_and_counts_runs(
    tmp_path: Path, src: str, kind: str, table: str
) -> None:
    """The issue's "done when" for the other kinds: run.json differing only in
    machine.cpu.model -> named, and the newer CPU's run does not supersede the older's."""
    raw = tmp_path / "raw"
    older, newer = _two_copies(raw, src, kind, CPU_167)
    data = processed_build.build(raw, tmp_path / "processed", FAST)
    rows = getattr(data, table)
    shown = rows[rows["headline"]] if "headline" in rows else rows
    # Kept apart: one host key per CPU, each with its own run.
    assert set(zip(shown["host"], shown["run_id"], strict=True)) == {
        ("box", older),
        ("box#2", newer),
    }
    ledger = data.ledger.set_index("run_id")
    assert ledger.loc[[older, newer], "use"].tolist() == ["headline", "headline"]
    # Named: each run's reason says which CPU, and the label's warning names both.
    for run_id, key in ((older, "box"), (newer, "box#2")):
        reason = ledger.loc[run_id, "reason"]
        assert reason.startswith(f"newest {kind} run; CPU {key} (host label box holds runs")
        assert "box#2 = Intel(R) Xeon(R) Processor [GenuineIntel family 6 model 167" in reason


@pytest.mark.parametrize(("src", "kind"), [(POLICY_SRC, "policy"), (COUNTS_SRC, "counts")])
def test_one_cpu_under_one_label_still_supersedes(tmp_path: Path, src: str, kind: str) -> None:
    raw = tmp_path / "raw"
    older, newer = _two_copies(raw, src, kind, dict(CPU_207))
    data = processed_build.build(raw, tmp_path / "processed", FAST)
    ledger = data.ledger.set_index("run_id")
    assert ledger.loc[[older, newer], "use"].tolist() == ["superseded", "headline"]
    assert ledger.loc[newer, "reason"] == f"newest {kind} run"


def test_a_second_cpu_seen_only_in_a_counts_run_names_the_label(tmp_path: Path) -> None:
    """One numbering over every kind: the bench runs of the label carry the warning
    although all of them are on its first CPU."""
    raw = tmp_path / "raw"
    write_run(raw, host="box", run_id=OLDER, started_at="2026-11-28T09:00:00+00:00",
              cpu_model=XEON, cpu=CPU_207, **FULL)  # fmt: skip
    counts = _copy_as(raw, COUNTS_SRC, "20261130T090000Z-counts-cp311-cccc",
                      "2026-11-30T09:00:00+00:00", CPU_167)  # fmt: skip
    data = processed_build.build(raw, tmp_path / "processed", FAST)
    runs = data.runs.set_index("run_id")
    assert runs.loc[OLDER, "warnings"].startswith("host label box holds runs on 2 CPUs, kept apart")
    assert "box#2 = Intel(R) Xeon(R) Processor [GenuineIntel family 6 model 167" in str(
        runs.loc[OLDER, "warnings"]
    )
    assert runs.loc[OLDER, "note"] == "headline; CPU box"
    assert set(data.counts["host"]) == {"box#2"}
    assert (
        data.ledger.set_index("run_id")
        .loc[counts, "reason"]
        .startswith("newest counts run; CPU box#2 (host label box holds runs on 2 CPUs")
    )


def test_a_measuring_command_notes_a_host_label_of_another_cpu(tmp_path: Path) -> None:
    """Two VMs that lscpu names alike (vendor, family, model, stepping) have differed in
    their flags: the report keeps such runs apart as label#2, and the command says so
    before it measures, while another label can still be chosen."""

    here = {"cpu_model": hostinfo.cpu_model(), "cpu": hostinfo.cpu_identity()}
    other = json.loads(json.dumps(here))
    other["cpu"]["flags_sha256"] = "0" * 64
    for host, machine in (("same", here), ("other", other)):
        run = tmp_path / host / "20260101T000000Z-cp311-aaaa"
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"machine": machine}), encoding="utf-8")
    line = cli._announce("bench", {"host": "other"}, tmp_path)
    assert "note: HOST other in" in line and "differs in flags_sha256" in line, line
    assert "note:" not in cli._announce("bench", {"host": "same"}, tmp_path)
    assert "note:" not in cli._announce("bench", {"host": "new"}, tmp_path)
