"""Loading a pool (kvqueue.sources.pool_loader) and fetching its members (fetch_members).

The fixture pool is our own code (``tests/pools/``); the offline fetch tests serve small
wheels around it from a local HTTP server (``tests/test_upstream_ranges.py``'s helpers).
Tests marked ``network`` read real releases into the cache.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from poolutil import POOL_DIR, write_fixture_pool
from test_upstream import no_network

# The local wheel server of the range-read tests, registered here as the fixture
# wheel_server (requested by name: a parameter would shadow the import).
from test_upstream_ranges import VERSION, WHEEL, serve, wheel
from test_upstream_ranges import server as wheel_server  # noqa: F401

from kvqueue.gate import pool_gate
from kvqueue.sources import fetch_errors, release_cache, release_fetch
from kvqueue.sources.pool_loader import PoolSourceError, load_pool
from kvqueue.subjects.pool_api import pool_api


def test_a_file_pool_loads_with_its_own_definitions_and_no_vllm(tmp_path):
    pool = load_pool(f"mine={write_fixture_pool(tmp_path)}")
    assert pool.label == "mine" and pool.pool_cls.__name__ == "BlockPool"
    assert pool.utils_names == (
        "BlockHash",
        "BlockHashWithGroupId",
        "FreeKVCacheBlockQueue",
        "KVCacheBlock",
        "make_block_hash_with_group_id",
    )
    assert "unused_config_reader" not in vars(pool.utils)
    assert pool.queue_calls == ("append_n", "popleft", "popleft_n", "prepend_n", "remove")
    assert not [m for m in sys.modules if m == "vllm" or m.startswith(("vllm.", "torch"))]
    api = pool_api(pool.pool_cls, pool.utils)
    p = api.new_pool(8)
    assert [b.block_id for b in p.get_new_blocks(3)] == [1, 2, 3]
    assert api.adaptations == ("init:hash_block_size",)


def test_the_queue_swap_runs_another_queue_inside_the_pool(tmp_path):
    pool = load_pool(f"{write_fixture_pool(tmp_path)}+queue=kvqueue")
    assert pool.queue is not None and pool.queue.source == "kvqueue"
    assert pool.queue_cls is pool.queue.queue_cls
    assert pool.queue.block_cls is pool.block_cls
    p = pool_api(pool.pool_cls, pool.utils).new_pool(8)
    assert type(p.free_block_queue) is pool.queue_cls


def test_a_queue_lacking_a_method_the_pool_calls_is_refused(tmp_path):
    path = write_fixture_pool(tmp_path)
    with pytest.raises(PoolSourceError) as info:
        load_pool(f"{path}+queue=tests/queues/good.py::IncompleteQueue")
    assert "\n" not in str(info.value) and "prepend_n" in str(info.value)


def test_a_pool_importing_something_new_loads_and_the_gate_refuses_it_when_used(tmp_path):
    # A new import is a placeholder: the pool loads, and the first use of the name is
    # recorded, so the gate refuses the pool naming it (one line).
    text = (POOL_DIR / "block_pool.py").read_text()
    text = text.replace(
        "from vllm.logger import init_logger\n",
        "from vllm.logger import init_logger\nfrom vllm.v1.core.sched import Scheduler\n",
    )
    used = text.replace(
        "    def get_num_free_blocks(self) -> int:\n",
        "    def get_num_free_blocks(self) -> int:\n        Scheduler.tick()\n",
    )
    assert used != text
    baseline = load_pool(str(write_fixture_pool(tmp_path / "a")))
    named = load_pool(str(write_fixture_pool(tmp_path / "b", pool_text=text)))
    assert "vllm.v1.core.sched" in named.graph.stubbed
    assert pool_gate.pool_gate(baseline, named, (64,)).ok
    broken = load_pool(str(write_fixture_pool(tmp_path / "c", pool_text=used)))
    result = pool_gate.pool_gate(baseline, broken, (64,))
    assert not result.ok
    assert "vllm.v1.core.sched.Scheduler.tick has no stand-in here" in result.error
    assert "\n" not in result.error


def test_a_name_kv_cache_utils_does_not_define_is_refused(tmp_path):
    text = (
        (POOL_DIR / "block_pool.py")
        .read_text()
        .replace("    BlockHash,\n", "    BlockHash,\n    Gone,\n")
    )
    path = write_fixture_pool(tmp_path, pool_text=text)
    with pytest.raises(PoolSourceError) as info:
        load_pool(str(path))
    assert str(info.value) == (
        f"{(tmp_path / 'kv_cache_utils.py').resolve()} does not define Gone, which "
        "block_pool.py imports from it"
    )


def test_a_third_party_import_is_a_placeholder_never_imported(tmp_path):
    text = "import torch\n" + (POOL_DIR / "block_pool.py").read_text()
    pool = load_pool(str(write_fixture_pool(tmp_path, pool_text=text)))
    assert "torch" in pool.graph.stubbed
    assert "torch" not in sys.modules


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("vllm==0.9.0", "vllm==0.9.0: pool subjects start at vLLM 0.9.1"),
        ("kvqueue", "'kvqueue' is a queue, not a pool"),
        ("no/such/block_pool.py", "'no/such/block_pool.py' is not a file"),
        ("vllm==0.33.0+queue=", "is not of the form POOL+queue=QUEUE"),
    ],
)
def test_sources_refused_before_anything_is_read(source, message, empty_cache, monkeypatch):
    no_network(monkeypatch)
    with pytest.raises(PoolSourceError) as info:
        load_pool(source)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_git_branch_pool(tmp_path):
    repo = tmp_path / "repo"
    core = repo / "vllm" / "v1" / "core"
    write_fixture_pool(core)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "pool")
    pool = load_pool(f"git:{repo}@main")
    assert pool.texts.metrics_text is None
    assert pool.texts.pool_path.endswith(":vllm/v1/core/block_pool.py")
    with pytest.raises(PoolSourceError, match="no such commit"):
        load_pool(f"git:{repo}@nope")


# ------------------------------------------------------------- fetching the members

POOL_BYTES = (POOL_DIR / "block_pool.py").read_bytes()
UTILS_BYTES = (POOL_DIR / "kv_cache_utils.py").read_bytes()


def test_fetch_members_reads_each_member_once_and_reuses_the_cache(request, monkeypatch):
    _, handler = request.getfixturevalue("wheel_server")
    members = {release_cache.POOL_MEMBER: POOL_BYTES, release_cache.MEMBER: UTILS_BYTES}
    serve(handler, {WHEEL: wheel(members)})
    paths = release_fetch.fetch_members(VERSION)
    assert paths[release_cache.METRICS_MEMBER] is None
    for member, data in members.items():
        path = paths[member]
        assert path is not None and path.read_bytes() == data
        record = release_cache.read_record(VERSION, member)
        assert record is not None and record.member == member
        assert "member sha256 = the wheel's RECORD" in record.verified
    assert paths[release_cache.MEMBER] == release_cache.cached_path(VERSION)
    assert release_fetch.fetch_release(VERSION) == paths[release_cache.MEMBER]
    no_network(monkeypatch)
    assert release_fetch.fetch_members(VERSION) == paths


def test_a_release_without_block_pool_is_refused_in_one_line(request):
    _, handler = request.getfixturevalue("wheel_server")
    serve(handler, {WHEEL: wheel({release_cache.MEMBER: UTILS_BYTES})})
    with pytest.raises(fetch_errors.ModuleMissing) as info:
        release_fetch.fetch_members(VERSION)
    assert str(info.value) == (
        f"vLLM release {VERSION} has no vllm/v1/core/block_pool.py (not in {WHEEL}): "
        "it predates the module, too old for this benchmark"
    )
    assert not release_cache.member_cached_path(VERSION, release_cache.POOL_MEMBER).exists()


def test_a_member_failing_the_record_sha256_is_refused(request):
    _, handler = request.getfixturevalue("wheel_server")
    members = {release_cache.POOL_MEMBER: POOL_BYTES, release_cache.MEMBER: UTILS_BYTES}
    listed = {**members, release_cache.POOL_MEMBER: POOL_BYTES + b"# edited\n"}
    serve(handler, {WHEEL: wheel(members, record=listed)})
    with pytest.raises(fetch_errors.FetchError, match=r"block_pool\.py of .* has sha256"):
        release_fetch.fetch_members(VERSION)


def test_an_edited_cached_member_is_refused(request):
    _, handler = request.getfixturevalue("wheel_server")
    members = {release_cache.POOL_MEMBER: POOL_BYTES, release_cache.MEMBER: UTILS_BYTES}
    serve(handler, {WHEEL: wheel(members)})
    path = release_fetch.fetch_members(VERSION)[release_cache.POOL_MEMBER]
    assert path is not None
    path.write_bytes(POOL_BYTES + b"# edited\n")
    with pytest.raises(fetch_errors.CacheMismatch, match="is not the one fetched"):
        release_fetch.fetch_members(VERSION)


def test_a_release_with_kv_cache_utils_cached_by_the_queue_fetch_reads_only_the_rest(request):
    _, handler = request.getfixturevalue("wheel_server")
    members = {release_cache.POOL_MEMBER: POOL_BYTES, release_cache.MEMBER: UTILS_BYTES}
    serve(handler, {WHEEL: wheel(members)})
    first = release_fetch.fetch_release(VERSION)
    before = release_cache.read_record(VERSION)
    paths = release_fetch.fetch_members(VERSION)
    assert paths[release_cache.MEMBER] == first
    assert release_cache.read_record(VERSION) == before  # record.json untouched


# ------------------------------------------------------------------ real releases

RELEASES = ["0.10.0", "0.18.0", "0.25.0", "0.31.0", "0.32.0", "0.33.0"]
ADAPTATIONS = {
    "0.10.0": (
        "cache_full_blocks:block_hashes+hash_fn",
        "touch:tuple-of-lists",
        "BlockHash:NamedTuple",
    ),
}


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_real_release_pools_load_without_torch(version):
    pool = load_pool(f"vllm=={version}")
    swapped = load_pool(f"vllm=={version}+queue=kvqueue")
    assert swapped.queue_cls is not pool.queue_cls
    api = pool_api(pool.pool_cls, pool.utils)
    assert api.adaptations == ADAPTATIONS.get(version, ("init:hash_block_size",))
    assert (pool.texts.metrics_text is None) == (version == "0.10.0")
    assert not [m for m in sys.modules if m == "vllm" or m.startswith(("vllm.", "torch"))]
    shas = pool.texts.sha256s()
    record = release_cache.read_record(version, release_cache.POOL_MEMBER)
    assert record is not None and record.file_sha256 == shas[release_cache.POOL_MEMBER]
