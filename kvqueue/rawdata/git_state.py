"""Whether each run folder is committed: the git state of the raw data.

Not a raw file, so it is part of the processed manifest's key: committing, editing or
reverting a run folder changes the manifest and the tables are rebuilt; with the same git
state a rebuild is byte-identical. A complete run whose folder differs from its commit is
left out of the report as altered.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from kvqueue.rawdata import raw_reader

COMMITTED, MODIFIED, UNTRACKED, NO_GIT = "committed", "modified", "untracked", "no git"
_GIT_TIMEOUT = 60.0
#: Variables that would point git at another repository than the one holding the data.
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")


def _git(cwd: Path, *args: str) -> bytes | None:
    """stdout of ``git -C cwd ARGS`` (read-only: no optional locks; paths taken
    literally, never as pathspec patterns), or None on failure."""
    exe = shutil.which("git")
    if exe is None:
        return None
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    try:
        proc = subprocess.run(
            [exe, "--no-optional-locks", "--literal-pathspecs", "-C", str(cwd), *args],
            capture_output=True,
            env=env,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_states(raw_dir: Path | str) -> dict[str, str]:
    """The git state of every run folder, keyed ``"<host>/<run_id>"`` (best effort).

    ``committed``: the folder's files are in ``HEAD`` and none differs from it (staged
    or not), nor is there an untracked file in it; ``modified``: in ``HEAD`` but changed,
    deleted, or with a new file; ``untracked``: nothing of the folder is in ``HEAD``;
    ``no git``: git is not installed, the raw data is not in a work tree, or git fails.
    Gitignored files do not count. Only reads the repository (``git ls-tree HEAD`` and
    ``git status --porcelain``, without optional locks).
    """
    root = Path(raw_dir).resolve()
    keys = [d.relative_to(root).as_posix() for d in raw_reader.run_dirs(root)]
    if not keys:
        return {}
    top_out = _git(root, "rev-parse", "--show-toplevel")
    top = Path(os.fsdecode(top_out).strip()).resolve() if top_out else None
    if top is None or not root.is_relative_to(top):
        return dict.fromkeys(keys, NO_GIT)
    rel = root.relative_to(top).as_posix()  # "." when the raw data is the work tree
    status = _git(top, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", rel)
    if status is None:
        return dict.fromkeys(keys, NO_GIT)
    # A repository without commits has no HEAD: then nothing is committed.
    head = _git(top, "ls-tree", "-r", "-z", "--name-only", "--full-tree", "HEAD", "--", rel)
    prefix = "" if rel == "." else f"{rel}/"

    def run_key(path: str) -> str | None:
        # "<host>/<run_id>" of a repository path inside a run folder, else None.
        parts = path[len(prefix) :].split("/") if path.startswith(prefix) else []
        return "/".join(parts[:2]) if len(parts) > 2 else None

    in_head = {run_key(p) for p in os.fsdecode(head or b"").split("\0")}
    changed = set()
    entries = iter(os.fsdecode(status).split("\0"))
    for entry in entries:
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:  # a rename or copy: its source path follows
            changed.add(run_key(next(entries, "")))
        if entry and code != "!!":
            changed.add(run_key(path))
    return {
        key: UNTRACKED if key not in in_head else MODIFIED if key in changed else COMMITTED
        for key in keys
    }


def with_git_state(
    raw: raw_reader.RawData, git_states: Mapping[str, str] | None
) -> raw_reader.RawData:
    """``raw`` with every complete run whose folder differs from its git commit altered.

    Raw data is write-once and committed: a committed run folder whose files no longer
    match the commit was edited. For a sealed run the digests say so already; for an
    unsealed (schema-1) run, such as every run committed before digests existed, git is
    the only witness (scaling its ns by 0.7 moved a headline from 19.8 % to 43.8 %).
    """
    if not git_states:
        return raw
    runs = []
    for run in raw.runs:
        state = git_states.get(f"{run.host}/{run.run_id}")
        if state == MODIFIED and run.complete and run.altered is None:
            run = replace(run, altered="raw files differ from their git commit")
        runs.append(run)
    return replace(raw, runs=tuple(runs))
