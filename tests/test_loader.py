"""Source strings -> queue classes (kvqueue.sources.loader), with provenance and one-line errors."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import socket
import traceback
from pathlib import Path

import pytest

from kvqueue import schema
from kvqueue.sources import loader, release_cache

KVQUEUE_DIR = Path(loader.__file__).resolve().parent.parent
OURS = KVQUEUE_DIR / "subjects" / "our_queue.py"
BLOCK = KVQUEUE_DIR / "subjects" / "stand_in_block.py"


def class_text(path: Path, name: str) -> str:
    """Cut class ``name`` (decorators included) out of ``path`` independently of the loader."""
    text = path.read_text(encoding="utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            return "".join(text.splitlines(keepends=True)[start - 1 : node.end_lineno])
    raise AssertionError(f"{name} not in {path}")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def smoke(variant: loader.Variant) -> None:
    """Exercise a loaded queue a little: it must link the shared block class."""
    blocks = [variant.block_cls(block_id=i) for i in range(4)]
    q = variant.queue_cls(blocks[:3])
    assert [b.block_id for b in q.popleft_n(2)] == [0, 1]
    q.append(blocks[3])
    assert [b.block_id for b in q.get_all_free_blocks()] == [2, 3]
    assert q.num_free_blocks == 2


# ------------------------------------------------------------------ file sources


def test_file_source(good_path):
    (v,) = loader.load_variants([str(good_path)])
    assert v.label == str(good_path)
    assert v.queue_cls.__name__ == "FreeKVCacheBlockQueue"
    assert v.block_cls.__name__ == "KVCacheBlock"
    assert not v.is_bound
    smoke(v)
    prov = v.provenance()
    assert prov["resolved_path"] == str(good_path.resolve())
    assert prov["class_name"] == "FreeKVCacheBlockQueue"
    assert prov["vllm_version"] is None
    assert prov["class_sha256"] == sha(class_text(good_path, "FreeKVCacheBlockQueue"))
    assert prov["file_sha256"] == release_cache.sha256_file(good_path)
    assert prov["block_source"] == str(good_path)
    assert prov["block_class_sha256"] == sha(class_text(good_path, "KVCacheBlock"))
    assert prov["is_bound"] is False


def test_block_class_text_includes_decorator(good_path):
    src = loader.read_source(str(good_path), loader.BLOCK_CLASS)
    assert src.text.startswith("@dataclass(slots=True)\nclass KVCacheBlock")
    assert src.first_line == good_path.read_text().splitlines().index("@dataclass(slots=True)") + 1


def test_relative_file_source_resolves(good_path, monkeypatch):
    monkeypatch.chdir(good_path.parent)
    (v,) = loader.load_variants(["good.py"])
    assert v.queue_src.path == str(good_path.resolve())


def test_file_class_suffix_picks_another_class(good_path):
    src = loader.read_source(f"{good_path}::KVCacheBlock")
    assert src.class_name == "KVCacheBlock"
    assert src.source == f"{good_path}::KVCacheBlock"
    # The suffix wins over the class_name argument.
    assert loader.read_source(f"{good_path}::IncompleteQueue", "KVCacheBlock").class_name == (
        "IncompleteQueue"
    )
    floor = loader.load_variants([str(good_path), f"{OURS}::FloorKVCacheBlockQueue"])
    assert floor[1].queue_cls.__name__ == "FloorKVCacheBlockQueue"
    assert floor[1].is_bound
    smoke(floor[1])


def test_split_class():
    assert loader.split_class("a/b.py::Q") == ("a/b.py", "Q")
    assert loader.split_class("git:/r@main::Q") == ("git:/r@main", "Q")
    assert loader.split_class("kvqueue") == ("kvqueue", None)


def test_traceback_points_at_the_real_file_line(good_path):
    """Classes are padded to their line in the file, so tracebacks show the real line."""
    (v,) = loader.load_variants([str(good_path)])
    q = v.queue_cls([])
    with pytest.raises(ValueError, match="No free blocks available") as info:
        q.popleft()
    frame = traceback.extract_tb(info.tb)[-1]
    lines = good_path.read_text().splitlines()
    assert frame.filename == str(good_path.resolve())
    assert lines[frame.lineno - 1].strip() == 'raise ValueError("No free blocks available")'


# ------------------------------------------------------------------ git sources


def test_a_tilde_in_a_source_is_the_home_folder(git_repo, good_text, good_path, monkeypatch):
    """Make hands sources over verbatim: ``git:~/repo@main`` (as the README writes it)
    and ``~/file.py`` name the home folder, as they would in a shell."""
    repo, (first,) = git_repo([good_text])
    monkeypatch.setenv("HOME", str(repo.parent))
    got = loader.read_source(f"git:~/{repo.name}@main")
    assert got.sha256 == sha(class_text(good_path, "FreeKVCacheBlockQueue"))
    assert got.path.startswith(f"{repo.resolve()}@{first}")
    (repo.parent / "mine.py").write_text(good_text, encoding="utf-8")
    assert loader.read_source("~/mine.py").sha256 == got.sha256


def test_git_source_by_sha_and_branch(git_repo, good_text, good_path):
    changed = good_text.replace('"""Detach and return the first block."""', '"""Changed."""')
    assert changed != good_text
    repo, (first, second) = git_repo([good_text, changed])
    git_repo.git(repo, "branch", "-q", "old", first)

    by_sha = loader.read_source(f"git:{repo}@{first}")
    by_branch = loader.read_source(f"git:{repo}@old")
    head = loader.read_source(f"git:{repo}@main")
    expected = sha(class_text(good_path, "FreeKVCacheBlockQueue"))
    assert by_sha.sha256 == by_branch.sha256 == expected
    assert head.sha256 != expected
    assert by_sha.path == f"{repo.resolve()}@{first}:{release_cache.MEMBER}"
    # A branch or HEAD is recorded as the commit it named when it was read.
    assert by_branch.path == f"{repo.resolve()}@{first}:{release_cache.MEMBER} (ref old)"
    by_head = loader.read_source(f"git:{repo}@HEAD")
    assert by_head.path == f"{repo.resolve()}@{second}:{release_cache.MEMBER} (ref HEAD)"
    assert by_sha.vllm_version is None
    assert by_sha.file_sha256 == sha(good_text)

    variants = loader.load_variants([f"git:{repo}@{first}", f"git:{repo}@{second}"])
    assert [v.block_src.path for v in variants] == [by_sha.path] * 2
    for v in variants:
        smoke(v)


def test_git_source_with_class_suffix(git_repo, good_text):
    repo, (commit,) = git_repo([good_text])
    src = loader.read_source(f"git:{repo}@{commit}::IncompleteQueue")
    assert src.class_name == "IncompleteQueue"


# ------------------------------------------------------------- kvqueue sources


def test_kvqueue_and_floor():
    own, floor = loader.load_variants(["kvqueue", "kvqueue:floor"])
    assert own.queue_cls.__name__ == "FreeKVCacheBlockQueue"
    assert floor.queue_cls.__name__ == "FloorKVCacheBlockQueue"
    assert not own.is_bound
    assert floor.is_bound
    assert own.queue_src.path == floor.queue_src.path == str(OURS)
    assert own.block_src.path == str(BLOCK)
    assert own.queue_src.sha256 == sha(class_text(OURS, "FreeKVCacheBlockQueue"))
    assert floor.queue_src.sha256 == sha(class_text(OURS, "FloorKVCacheBlockQueue"))
    assert own.provenance()["vllm_version"] is None
    smoke(own)
    smoke(floor)


def test_kvqueue_class_suffixes():
    assert loader.read_source("kvqueue:floor").class_name == "FloorKVCacheBlockQueue"
    assert loader.read_source("kvqueue:floor", "KVCacheBlock").path == str(BLOCK)
    assert loader.read_source("kvqueue::KVCacheBlock").path == str(BLOCK)
    v = loader.load_variants(["kvqueue", "kvqueue::FloorKVCacheBlockQueue"])[1]
    assert v.is_bound


def test_kvqueue_is_executed_in_a_fresh_namespace():
    """The loaded class is a copy cut from subject/our_queue.py, not the imported module's class."""
    from kvqueue.subjects import our_queue, stand_in_block

    (v,) = loader.load_variants(["kvqueue"])
    assert v.queue_cls is not our_queue.FreeKVCacheBlockQueue
    assert v.block_cls is not stand_in_block.KVCacheBlock
    assert v.queue_cls.__module__.startswith("kvqueue._variants.")


# ------------------------------------------------------------------ shared block


def test_all_variants_share_the_baselines_block_class(good_path):
    sources = [str(good_path), "kvqueue", "kvqueue:floor", str(good_path)]
    variants = loader.load_variants(sources)
    block_cls = variants[0].block_cls
    assert variants[0].block_src.path == str(good_path.resolve())
    assert all(v.block_cls is block_cls for v in variants)
    assert all(v.block_src is variants[0].block_src for v in variants)
    # Each variant lives in its own namespace, even an A/A repeat of the same source.
    assert len({id(v.queue_cls) for v in variants}) == len(variants)
    assert len({v.queue_cls.__module__ for v in variants}) == len(variants)
    for v in variants:
        q = v.queue_cls([block_cls(block_id=0)])
        assert type(q.fake_free_list_head) is block_cls
        assert type(q.fake_free_list_tail) is block_cls
        # The queue's module global KVCacheBlock is the shared class.
        assert v.queue_cls.__init__.__globals__["KVCacheBlock"] is block_cls
        smoke(v)


def test_block_source_override(good_path):
    variants = loader.load_variants(["kvqueue", str(good_path)], block_source=str(good_path))
    assert variants[0].block_src.path == str(good_path.resolve())
    assert all(v.block_cls is variants[0].block_cls for v in variants)
    q = variants[0].queue_cls([])
    assert isinstance(q.fake_free_list_head, variants[0].block_cls)
    # A ::Class suffix on the block source is ignored: the block class is KVCacheBlock.
    v = loader.load_variants(["kvqueue"], block_source=f"{good_path}::IncompleteQueue")[0]
    assert v.block_cls.__name__ == "KVCacheBlock"


def test_kvqueue_baseline_uses_the_stand_in_block():
    v = loader.load_variants(["kvqueue"])[0]
    assert v.block_src.source == "kvqueue"
    fields = {f for f in v.block_cls.__dataclass_fields__}
    assert {"block_id", "prev_free_block", "next_free_block"} <= fields


# ----------------------------------------------------------------------- labels


def test_variant_labels():
    assert schema.variant_labels(["a", "a"]) == ["a", "a#2"]
    assert schema.variant_labels(["a", "b", "a", "a"]) == ["a", "b", "a#2", "a#3"]
    assert schema.variant_labels([]) == []


def test_aa_pair_labels(good_path):
    variants = loader.load_variants(["kvqueue", "kvqueue"])
    assert [v.label for v in variants] == ["kvqueue", "kvqueue#2"]
    assert [v.source for v in variants] == ["kvqueue", "kvqueue"]
    assert variants[0].queue_src.sha256 == variants[1].queue_src.sha256


# ---------------------------------------------------------- cached release source


def index_at(monkeypatch, url: str) -> None:
    """Make ``url`` the only package index (pip's own configuration is ignored)."""
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", url)


def offline(monkeypatch) -> None:
    """An index on a local port that refuses connections: any network use fails."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening
        index_at(monkeypatch, f"http://127.0.0.1:{sock.getsockname()[1]}/simple/")


def empty_index(monkeypatch, tmp_path: Path) -> None:
    """A reachable index (a folder) that lists no vLLM release at all."""
    (tmp_path / "simple").mkdir()
    index_at(monkeypatch, (tmp_path / "simple").as_uri())


def test_release_source_from_cache(empty_cache, good_path, monkeypatch):
    """``vllm==X`` reads the cached file (checked against its record); no network."""
    cached = release_cache.cached_path("9.9.9")
    assert cached.is_relative_to(empty_cache)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(good_path.read_bytes())
    record = release_cache.ReleaseRecord(
        vllm_version="9.9.9",
        file_sha256=release_cache.sha256_file(cached),
        file_size=cached.stat().st_size,
        wheel="vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl",
        wheel_sha256="0" * 64,
        wheel_sha256_from_index=True,
        fetched_at="2026-01-01T00:00:00Z",
    )
    release_cache.record_path("9.9.9").write_text(json.dumps(record.to_json()))
    offline(monkeypatch)
    variants = loader.load_variants(["vllm==9.9.9", "kvqueue"])
    prov = variants[0].provenance()
    assert prov["vllm_version"] == "9.9.9"
    assert prov["resolved_path"] == str(cached)
    assert prov["file_sha256"] == release_cache.sha256_file(cached)
    assert prov["class_sha256"] == sha(class_text(good_path, "FreeKVCacheBlockQueue"))
    assert variants[0].block_src.vllm_version == "9.9.9"
    assert variants[1].provenance()["vllm_version"] is None
    assert variants[1].block_cls is variants[0].block_cls


# ----------------------------------------------------------------------- errors


def assert_one_line_source_error(excinfo, *fragments: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message, message
    assert message.strip() == message and message
    for fragment in fragments:
        assert fragment in message, message


def test_unknown_release(empty_cache, monkeypatch, tmp_path):
    empty_index(monkeypatch, tmp_path)
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants(["vllm==0.0.999"])
    assert_one_line_source_error(info, "0.0.999", "does not exist on the package index")
    assert not release_cache.cached_path("0.0.999").exists()


def test_no_network_and_no_cache(empty_cache, monkeypatch):
    offline(monkeypatch)
    with pytest.raises(loader.SourceError) as info:
        loader.read_source("vllm==0.32.7")
    assert_one_line_source_error(info, "cannot reach the package index", str(empty_cache))


@pytest.mark.parametrize("version", ["abc", "0..1", "0.32.0; rm -rf /", "", "v0.32.0", "0.32.0 "])
def test_malformed_version(version, empty_cache, monkeypatch):
    offline(monkeypatch)
    with pytest.raises(loader.SourceError) as info:
        loader.read_source(f"vllm=={version}")
    assert_one_line_source_error(info, "is not a vLLM version number")
    assert not empty_cache.exists()


@pytest.mark.parametrize("version", ["0.32", "0.32.0rc1", "0.32.0.post1", "1"])
def test_well_formed_versions_go_to_the_index(version, empty_cache, monkeypatch, tmp_path):
    empty_index(monkeypatch, tmp_path)
    with pytest.raises(loader.SourceError) as info:
        loader.read_source(f"vllm=={version}")
    assert_one_line_source_error(info, f"vLLM release {version} does not exist")


def test_file_not_found(tmp_path):
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants([str(tmp_path / "missing.py")])
    assert_one_line_source_error(info, "missing.py", "is not a file")
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants([str(tmp_path)])  # a folder is not a file either
    assert_one_line_source_error(info, "is not a file")


def test_class_not_found(good_path):
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants([f"{good_path}::NoSuchQueue"])
    assert_one_line_source_error(info, "class NoSuchQueue not found in", str(good_path.resolve()))


def test_queue_class_missing_from_file(tmp_path, good_text):
    only_block = tmp_path / "only_block.py"
    only_block.write_text(good_text.split("class FreeKVCacheBlockQueue")[0])
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants(["kvqueue", str(only_block)])
    assert_one_line_source_error(info, "class FreeKVCacheBlockQueue not found")


def test_block_class_missing_from_baseline(tmp_path, good_text):
    """A baseline file without KVCacheBlock needs --block-source."""
    only_queue = tmp_path / "only_queue.py"
    only_queue.write_text(good_text.replace("class KVCacheBlock:", "class SomeOtherBlock:"))
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants([str(only_queue), "kvqueue"])
    assert_one_line_source_error(info, "class KVCacheBlock not found in", str(only_queue))
    variants = loader.load_variants([str(only_queue), "kvqueue"], block_source="kvqueue")
    assert variants[0].block_src.source == "kvqueue"
    smoke(variants[0])


def test_bad_class_suffix(good_path):
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants([f"{good_path}::1Queue"])
    assert_one_line_source_error(info, "'1Queue'", "is not a class name")
    with pytest.raises(loader.SourceError, match="is not a class name"):
        loader.load_variants([f"{good_path}::"])


def test_syntax_error(tmp_path, good_text):
    bad = tmp_path / "bad.py"
    lines = good_text.splitlines(keepends=True)
    target = next(i for i, line in enumerate(lines) if "def popleft(self)" in line)
    lines[target] = lines[target].replace("def popleft(self)", "def popleft(self")
    bad.write_text("".join(lines))
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants(["kvqueue", str(bad)])
    assert_one_line_source_error(info, "syntax error in", str(bad.resolve()), f"line {target + 1}")


def test_class_that_fails_to_execute(tmp_path):
    bad = tmp_path / "bad_base.py"
    bad.write_text(
        "class FreeKVCacheBlockQueue(UndefinedBase):\n"
        '    """Its base class is not defined in the namespace."""\n'
    )
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants(["kvqueue", str(bad)])
    assert_one_line_source_error(info, "failed to execute", "NameError", "UndefinedBase")


@pytest.mark.parametrize(
    ("cls", "missing"),
    [
        ("IncompleteQueue", "prepend_n, iter_blocks_after"),
        ("KVCacheBlock", ", ".join(loader.QUEUE_METHODS)),
    ],
)
def test_class_lacking_queue_methods(good_path, cls, missing):
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants(["kvqueue", f"{good_path}::{cls}"])
    assert_one_line_source_error(info, f"class {cls}", "lacks queue method(s): " + missing)


def test_attribute_that_is_not_callable(tmp_path, good_text):
    bad = tmp_path / "not_callable.py"
    bad.write_text(
        good_text.replace(
            "    def get_all_free_blocks(self)",
            "    get_all_free_blocks = 3\n\n    def _unused(self)",
        )
    )
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants(["kvqueue", str(bad)])
    assert_one_line_source_error(info, "lacks queue method(s): get_all_free_blocks")


def test_git_ref_does_not_exist(git_repo, good_text):
    repo, _ = git_repo([good_text])
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants([f"git:{repo}@no-such-branch"])
    assert_one_line_source_error(info, "cannot read", "'no-such-branch'", str(repo))


def test_git_commit_without_the_member(git_repo, good_text):
    repo, (commit,) = git_repo([good_text])
    git_repo.git(repo, "rm", "-q", release_cache.MEMBER)
    git_repo.git(repo, "commit", "-q", "-m", "drop")
    with pytest.raises(loader.SourceError) as info:
        loader.read_source(f"git:{repo}@main")
    assert_one_line_source_error(info, "cannot read", release_cache.MEMBER)
    assert loader.read_source(f"git:{repo}@{commit}").class_name == "FreeKVCacheBlockQueue"


def test_git_repo_does_not_exist(tmp_path):
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants([f"git:{tmp_path / 'nowhere'}@main"])
    assert_one_line_source_error(info, "git repository", "does not exist")


def test_git_path_that_is_not_a_repo(tmp_path):
    """A folder that is no repository said "no such commit" (issue 36.6)."""
    with pytest.raises(loader.SourceError) as info:
        loader.read_source(f"git:{tmp_path}@main")
    assert str(info.value) == (
        f"'{tmp_path}' is not a git repository (git:REPO@REF reads a commit of one)"
    )


def test_git_path_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(loader.SourceError) as info:
        loader.read_source(f"git:{tmp_path / 'f'}@main")
    assert_one_line_source_error(info, "is a file, not a repository's folder")


@pytest.mark.parametrize("spec", ["git:", "git:/some/repo", "git:@main", "git:/some/repo@"])
def test_malformed_git_source(spec):
    with pytest.raises(loader.SourceError) as info:
        loader.read_source(spec)
    assert_one_line_source_error(info, "git:REPO_PATH@REF")


def test_unknown_source_word():
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants(["kvqueue:ceiling"])
    assert_one_line_source_error(info, "kvqueue:ceiling", "vllm==X.Y.Z")


def test_no_sources():
    with pytest.raises(loader.SourceError) as info:
        loader.load_variants([])
    assert_one_line_source_error(info, "no variant sources")


# ------------------------------------------------------------------ named variants


def test_a_name_labels_a_source_and_the_source_is_recorded_beside_it(good_path):
    assert schema.split_name("base=kvqueue") == ("base", "kvqueue")
    assert schema.split_name("vllm==0.32.0") == (None, "vllm==0.32.0")
    assert schema.split_name("new=vllm==0.32.0") == ("new", "vllm==0.32.0")
    assert schema.split_name("./a=b.py") == (None, "./a=b.py")  # a path, not a name
    assert schema.split_name("git:/r@main") == (None, "git:/r@main")
    labels = schema.variant_labels(["base=kvqueue", f"mine={good_path}", "base=kvqueue"])
    assert labels == ["base", "mine", "base#2"]
    variants = loader.load_variants(["base=kvqueue", f"mine={good_path}"])
    assert [v.label for v in variants] == ["base", "mine"]
    assert [v.source for v in variants] == ["kvqueue", str(good_path)]
    prov = variants[1].provenance()
    assert prov["label"] == "mine" and prov["source"] == str(good_path)


def test_a_file_whose_name_holds_an_equals_sign_stays_a_file(tmp_path, good_text):
    odd = tmp_path / "a=b.py"
    odd.write_text(good_text, encoding="utf-8")
    assert schema.split_name(str(odd)) == (None, str(odd))
    (variant,) = loader.load_variants([str(odd)])
    assert variant.label == str(odd)
