"""The Sandbox protocol on every backend (a backend added by a module and a table row included: `fake`,
tests/envs/fake_backend.py), and the closed defaults every sandbox starts with."""

from __future__ import annotations

import mmap
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from envs.channel import UnixListener
from envs.executor import Marks, Opened, copy_tree, restore_changed, settle, walk_marks
from envs.host_paths import readable_source
from envs.remote import ExecutorSandbox
from envs.sandbox import BACKENDS as TABLE
from envs.sandbox import SandboxError, SandboxUnusable
from tests.conftest import BACKENDS, require_backend
from tests.envs import fake_backend

MakeSandbox = Callable[..., ExecutorSandbox]


@pytest.fixture(params=[*BACKENDS, "podman", fake_backend.ROW[0]])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """conftest's backends, podman (here and in the grading and escape tests only, not in every backend
    test), and `fake`, added for the test as a new backend is: its module and a row."""
    if request.param == fake_backend.ROW[0]:
        monkeypatch.setitem(TABLE, *fake_backend.ROW)
    require_backend(request.param)
    return str(request.param)


def tree(root: Path) -> dict[str, object]:
    """Every entry under `root`: a folder, a symlink's target, or a file's bytes and executable bit."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = ("link", os.readlink(path))
        elif path.is_dir():
            found[name] = "dir"
        else:
            found[name] = (path.read_bytes(), os.access(path, os.X_OK))
    return found


def processes(sandbox: ExecutorSandbox) -> list[str]:
    """`pid args` of every process in the sandbox, the `ps` that lists them included."""
    result = sandbox.run(["ps", "-e", "-o", "pid=,args="])
    assert result.exit_code == 0, result.output
    return [line.strip() for line in result.output.splitlines() if line.strip()]


# ---- run ------------------------------------------------------------------------------------------


def test_run_shell_string_and_exit_codes(sandbox: ExecutorSandbox) -> None:
    result = sandbox.run("echo out; echo err >&2; exit 7")
    assert result.exit_code == 7
    assert not result.ok
    assert result.output == "out\nerr\n"
    assert not result.timed_out and not result.truncated
    assert result.output_bytes == len(b"out\nerr\n")

    assert sandbox.run("true").ok
    assert sandbox.run("kill -9 $$").exit_code == 128 + 9


def test_run_argv_is_not_parsed_by_a_shell(sandbox: ExecutorSandbox) -> None:
    result = sandbox.run(["printf", "%s|", "a b", "$HOME", "*"])
    assert result.exit_code == 0
    assert result.output == "a b|$HOME|*|"

    missing = sandbox.run(["/no/such/program"])
    assert missing.exit_code == 127
    assert "exec failed" in missing.output


def test_run_cwd_defaults_to_the_repository(sandbox: ExecutorSandbox) -> None:
    assert sandbox.run("pwd").output == "/repo\n"
    assert sandbox.run("pwd", cwd="/repo/pkg").output == "/repo/pkg\n"
    assert sandbox.run(["ls"], cwd="/repo/tests").output == "test_calc.py\n"


def test_run_env_is_added_and_the_host_env_does_not_leak(
    make_sandbox: MakeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_TEST_HOST_SECRET", "hunter2")
    sandbox = make_sandbox()

    assert sandbox.run('echo "$GREETING $HOME"', env={"GREETING": "hello"}).output == "hello /tmp\n"
    assert sandbox.run("echo ${GREETING:-unset}").output == "unset\n"  # env is per command
    assert "hunter2" not in sandbox.run("env").output


def test_run_stdin(sandbox: ExecutorSandbox) -> None:
    assert sandbox.run("tr a-z A-Z", stdin="hello\nworld\n").output == "HELLO\nWORLD\n"
    # With no stdin given, a command reading it sees end-of-file instead of hanging.
    result = sandbox.run("cat; echo done", timeout=30)
    assert result.output == "done\n"
    assert result.duration_s < 10  # not held until the timeout, on a busy host too


# ---- files ----------------------------------------------------------------------------------------


def test_write_and_read_binary_in_new_nested_folders(sandbox: ExecutorSandbox) -> None:
    data = bytes(range(256)) * 1000 + b"\x00\xff\r\n"
    sandbox.write_file("deep/nested/folder/blob.bin", data)
    assert sandbox.read_file("deep/nested/folder/blob.bin") == data
    assert sandbox.read_file("/repo/deep/nested/folder/blob.bin") == data
    assert sandbox.run(["wc", "-c", "deep/nested/folder/blob.bin"]).output.split()[0] == str(len(data))

    sandbox.write_file("/tmp/a/b/empty", b"")
    assert sandbox.read_file("/tmp/a/b/empty") == b""

    sandbox.write_file("pkg/calc.py", b"changed\n")  # overwrites
    assert sandbox.read_file("pkg/calc.py") == b"changed\n"


def test_read_errors_are_errors_not_a_broken_sandbox(sandbox: ExecutorSandbox) -> None:
    with pytest.raises(SandboxError) as missing:
        sandbox.read_file("no/such/file")
    assert not isinstance(missing.value, SandboxUnusable)

    sandbox.write_file("big.bin", b"x" * 5000)
    with pytest.raises(SandboxError, match="over the limit"):
        sandbox.read_file("big.bin", max_bytes=4096)

    assert sandbox.failure is None
    assert sandbox.run("echo fine").output == "fine\n"


def test_a_tree_too_deep_to_walk_fails_the_request_not_the_executor(
    sandbox: ExecutorSandbox, tmp_path: Path
) -> None:
    """Red team (docs/reliability.md 5j): 1,500 nested folders made a walk raise RecursionError, which ended
    the executor, so the sandbox died as an infra error: an episode could escape its grade that way. Now
    the copy fails as the agent's tree's doing and the sandbox lives on."""
    made = sandbox.run("i=0; while [ $i -lt 1500 ]; do mkdir d && cd d || exit 1; i=$((i+1)); done")
    assert made.exit_code == 0, made.output
    with pytest.raises(SandboxError, match="RecursionError") as failed:
        sandbox.copy_out("/repo", tmp_path / "out")
    assert not isinstance(failed.value, SandboxUnusable)
    assert sandbox.failure is None
    assert sandbox.run("echo fine").output == "fine\n"


IPC_OBJECTS = (
    'python3 -c "import ctypes; c = ctypes.CDLL(None); '
    'print(c.msgget(0x1234, 0o1600), c.shmget(0x1235, 1 << 20, 0o1600), c.semget(0x1236, 1, 0o1600))"'
)


def test_a_reset_removes_system_v_ipc_objects(sandbox: ExecutorSandbox) -> None:
    """Red team (docs/reliability.md 5j): a message queue written in one episode was read after the reset
    by the next. The sandbox's IPC namespace is its own; a reset empties it."""
    made = sandbox.run(IPC_OBJECTS)
    assert made.exit_code == 0 and "-1" not in made.output.split(), made.output
    listed = sandbox.run("cat /proc/sysvipc/msg /proc/sysvipc/shm /proc/sysvipc/sem | grep -v key | wc -l")
    assert listed.output.strip() == "3"
    sandbox.reset()
    listed = sandbox.run("cat /proc/sysvipc/msg /proc/sysvipc/shm /proc/sysvipc/sem | grep -v key | wc -l")
    assert listed.output.strip() == "0"


FOLDER_META = """python3 -c '
import os, sys
for path in sys.argv[1:]:
    st = os.stat(path)
    print(path, oct(st.st_mode & 0o7777), st.st_mtime_ns, sorted(os.listxattr(path)), os.access(path, os.W_OK))
' """


def test_a_reset_restores_the_repository_folders_own_mode_times_and_attributes(
    sandbox: ExecutorSandbox,
) -> None:
    """Red team 3 (docs/reliability.md 5j, B1): a reset checked the entries under /repo, never /repo
    itself, so its mode, times and extended attributes passed to the next episode."""
    start = sandbox.run(FOLDER_META + "/repo").output
    changed = sandbox.run(
        "chmod 0751 /repo && touch -d @1000000 /repo && "
        "python3 -c \"import os; os.setxattr('/repo', 'user.leak', b'EP1')\""
    )
    assert changed.exit_code == 0, changed.output
    assert sandbox.run(FOLDER_META + "/repo").output != start
    sandbox.reset()
    assert sandbox.run(FOLDER_META + "/repo").output == start
    sandbox.run("chmod 0555 /repo")  # and a repository folder made read-only is written again
    sandbox.reset()
    assert sandbox.run(FOLDER_META + "/repo").output == start


def test_a_reset_restores_the_scratch_folders_mode_times_and_attributes(sandbox: ExecutorSandbox) -> None:
    """Red team 3 (B2, bubblewrap): `chmod 0555 /tmp` left the next episode unable to write /tmp. (On
    Docker /tmp and /dev/shm are root's: the agent cannot change them.)"""
    folders = " /tmp /dev/shm"
    start = sandbox.run(FOLDER_META + folders).output
    assert start.count("True") == 2, start
    sandbox.run(
        "python3 -c \"import os; [os.setxattr(p, 'user.leak', b'EP1') for p in ('/tmp', '/dev/shm')]\"; "
        "touch -d @2000000 /tmp /dev/shm; chmod 0555 /tmp; chmod 0511 /dev/shm"
    )
    sandbox.reset()
    assert sandbox.run(FOLDER_META + folders).output == start
    assert sandbox.run("touch /tmp/f /dev/shm/f").exit_code == 0


def test_a_reset_removes_what_closed_nested_folders_hold(sandbox: ExecutorSandbox) -> None:
    """Red team 3 (B5): files in nested folders of mode 000 in /tmp and /dev/shm survived a reset (the
    clear ignored its errors and could not walk into a closed folder)."""
    for root in ("/tmp", "/dev/shm", "/repo"):
        made = sandbox.run(
            f"mkdir -p {root}/a/b && echo SECRET > {root}/a/b/f && chmod 000 {root}/a/b {root}/a"
        )
        assert made.exit_code == 0, made.output
    sandbox.reset()
    found = sandbox.run(
        "ls -a /tmp /dev/shm /repo; chmod -R u+rwx /tmp/a /dev/shm/a /repo/a; cat /tmp/a/b/f /dev/shm/a/b/f /repo/a/b/f"
    )
    assert "SECRET" not in found.output
    assert sandbox.run("ls -A /dev/shm").output == ""


def test_a_reset_never_follows_links_in_scratch_folders(sandbox: ExecutorSandbox) -> None:
    """Red team 3 (B6): the clear of /tmp chmod-ed what links in a read-only folder there pointed to,
    /repo/pkg made 700 after /repo had been put back."""
    start = sandbox.run("stat -c '%n %a' /repo /repo/pkg").output
    linked = sandbox.run(
        "mkdir -p /tmp/a/c && ln -s /repo/pkg /tmp/a/c/s && ln -s /repo /tmp/a/c/t && chmod 500 /tmp/a/c"
    )
    assert linked.exit_code == 0, linked.output
    sandbox.reset()
    assert sandbox.run("stat -c '%n %a' /repo /repo/pkg").output == start


@pytest.mark.parametrize("root", ["/repo", "/tmp", "/dev/shm"])
def test_a_reset_removes_a_tree_too_deep_to_walk(sandbox: ExecutorSandbox, root: str) -> None:
    """Red team 3 (B4): 3,000 nested folders made every reset fail with RecursionError (safe, the pool
    replaces such a sandbox, but a waste): the removal is iterative, its paths short."""
    made = sandbox.run(
        f"cd {root} && python3 -c \"import os\nfor _ in range(3000): os.mkdir('d'); os.chdir('d')\n"
        "open('SECRET', 'w').close()\"",
        timeout=120,
    )
    assert made.exit_code == 0, made.output
    sandbox.reset()
    assert sandbox.run(f"ls -A {root} | grep -c '^d$'").output.strip() == "0"
    assert sandbox.run("echo fine").output == "fine\n"


MQUEUE = """python3 -c '
import ctypes, ctypes.util, os, sys
rt = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
print(rt.mq_open(b"/leak", os.O_RDWR | (os.O_CREAT if sys.argv[1] == "make" else 0), 0o600, None) >= 0)
' """


def test_a_reset_removes_posix_message_queues(sandbox: ExecutorSandbox) -> None:
    """Red team 3 (B7, bubblewrap): a POSIX message queue survived a reset: the sandbox had no /dev/mqueue
    for the reset to empty. Now it has its own there, as on Docker."""
    assert sandbox.run(MQUEUE + "make").output == "True\n"
    assert sandbox.run(MQUEUE + "open").output == "True\n"
    sandbox.reset()
    assert sandbox.run(MQUEUE + "open").output == "False\n"


PID1_SCHEDULING = """python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "show":
    print(os.getpriority(os.PRIO_PROCESS, 1), os.sched_getaffinity(1), os.sched_getscheduler(1), libc.syscall(252, 1, 1))
elif sys.argv[1] == "pin":
    os.sched_setaffinity(1, {min(os.sched_getaffinity(1))})
    print(libc.syscall(251, 1, 1, 3 << 13))  # ioprio_set(IOPRIO_WHO_PROCESS, 1, the idle class)
elif sys.argv[1] == "nice":
    os.setpriority(os.PRIO_PROCESS, 1, 17)
else:
    os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))
' """


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="ioprio's syscall numbers are x86_64's")
def test_a_reset_puts_back_the_executors_scheduling_or_fails(make_sandbox: MakeSandbox) -> None:
    """Red team 3 (B8): the agent's processes, of the executor's uid, changed PID 1's CPU affinity, I/O
    priority, nice value and scheduling policy, which the next episode's commands inherited. A reset puts
    back what it can (affinity, I/O priority) and fails where it cannot: the pool replaces the sandbox."""
    sandbox = make_sandbox()
    start = sandbox.run(PID1_SCHEDULING + "show").output
    pinned = sandbox.run(PID1_SCHEDULING + "pin")
    assert pinned.output == "0\n" and sandbox.run(PID1_SCHEDULING + "show").output != start
    sandbox.reset()
    assert sandbox.run(PID1_SCHEDULING + "show").output == start
    for change in ("nice", "idle"):
        sandbox = make_sandbox()
        changed = sandbox.run(PID1_SCHEDULING + change)
        assert changed.exit_code == 0, changed.output
        with pytest.raises(SandboxError, match="scheduling"):
            sandbox.reset()


def test_open_files_are_capped_per_process(make_sandbox: MakeSandbox) -> None:
    """Red team (docs/reliability.md 5j): 20,000 open files in each of 256 processes is more than the host's
    file table. Every backend caps a process at `open_files`."""
    sandbox = make_sandbox(open_files=256)
    assert sandbox.run("ulimit -n; ulimit -Hn").output.split() == ["256", "256"]
    many = sandbox.run("python3 -c \"fs = [open('/dev/null') for _ in range(300)]\"")
    assert many.exit_code != 0 and "Too many open files" in many.output


def test_copy_in_and_out_round_trip(sandbox: ExecutorSandbox, sample_repo: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "data.bin").write_bytes(bytes(range(256)) * 64)
    (src / "tool.sh").write_text("#!/bin/sh\necho tool ran\n")
    (src / "tool.sh").chmod(0o755)
    (src / "empty").mkdir()
    (src / "link").symlink_to("a/b/data.bin")

    sandbox.copy_in(src, "/repo/incoming")
    assert sandbox.run("./incoming/tool.sh").output == "tool ran\n"

    out = tmp_path / "out"
    sandbox.copy_out("/repo/incoming", out)
    assert tree(out) == tree(src)

    whole = tmp_path / "whole"
    sandbox.copy_out("/repo", whole)
    incoming = {f"incoming/{name}": entry for name, entry in tree(src).items()}
    assert tree(whole) == {**tree(sample_repo), "incoming": "dir", **incoming}


# ---- reset ----------------------------------------------------------------------------------------


def test_reset_restores_the_start_state_exactly(
    sandbox: ExecutorSandbox, sample_repo: Path, tmp_path: Path
) -> None:
    sandbox.write_file("pkg/calc.py", b"broken\n")
    sandbox.write_file("new/folder/file.txt", b"new")
    setup = sandbox.run(
        "rm README.md && rm -r tests && mkdir -p locked/inner && touch locked/inner/f"
        " && chmod 555 locked/inner locked && echo junk > /tmp/junk && mkdir /tmp/dir"
        " && (nohup sleep 1000 >/dev/null 2>&1 &)"
    )
    assert setup.exit_code == 0, setup.output
    assert sandbox.run("touch /opt/pristine/x").exit_code != 0  # the start state itself is read-only

    sandbox.reset()

    restored = tmp_path / "restored"
    sandbox.copy_out("/repo", restored)
    assert tree(restored) == tree(sample_repo)
    assert set(sandbox.run("ls -A /tmp").output.split()) <= harness_mounts_under_tmp(sandbox)
    assert len(processes(sandbox)) == 2  # the executor and the ps
    assert sandbox.run("python3 -c 'import pkg.calc; print(pkg.calc.add(2, 3))'").output == "5\n"


def test_reset_twice_and_after_a_timeout(sandbox: ExecutorSandbox, sample_repo: Path, tmp_path: Path) -> None:
    sandbox.run("rm -r pkg; sleep 100", timeout=0.5)
    sandbox.reset()
    sandbox.reset()
    restored = tmp_path / "restored"
    sandbox.copy_out("/repo", restored)
    assert tree(restored) == tree(sample_repo)


SNAPSHOT = """python3 -c '
import hashlib, os, json
found = {}
for root, dirs, files in os.walk("/repo"):
    for name in dirs + files:
        path = os.path.join(root, name)
        st = os.lstat(path)
        if os.path.islink(path):
            what = os.readlink(path)
        elif os.path.isdir(path):
            what = "dir"
        else:
            what = hashlib.sha256(open(path, "rb").read()).hexdigest()
        found[path] = [oct(st.st_mode), what]
print(json.dumps(found, sort_keys=True))
'"""
"""Every entry of /repo as the sandbox sees it: its full mode, and its content, link target or folder."""
CHANGES = {
    "same size and times": "cp -p pkg/calc.py /tmp/t && sed -i 's/a + b/a * b/' pkg/calc.py"
    " && touch -r /tmp/t pkg/calc.py",
    "modes": "chmod 600 README.md && chmod 711 pkg && chmod +x tests/test_calc.py",
    "unreadable folder": "echo x > pkg/new.py && chmod 000 pkg",
    "types swapped": "rm README.md && mkdir README.md && rm -r tests && echo x > tests",
    "links": "ln -sf /etc/passwd pkg/__init__.py && ln -f pkg/calc.py pkg/other.py",
    "renamed and back": "mv pkg/calc.py pkg/c2 && mv pkg/c2 pkg/calc.py",
    "read-only new tree": "mkdir -p locked/inner && touch locked/inner/f && chmod 555 locked/inner locked",
    "folder removed": "rm -r pkg",
}


def test_a_reset_undoes_every_kind_of_change_one_after_another(sandbox: ExecutorSandbox) -> None:
    """A reset puts back only what changed (issue 16: a repository of 10,000 files is not copied again),
    found by each entry's change time, which the agent's processes cannot set."""
    start = sandbox.run(SNAPSHOT).output
    for name, change in CHANGES.items():
        changed = sandbox.run(change)
        assert changed.exit_code == 0, (name, changed.output)
        assert (sandbox.run(SNAPSHOT).output == start) == (name == "renamed and back"), name
        sandbox.reset()
        assert sandbox.run(SNAPSHOT).output == start, name


def rich_repo(root: Path) -> Path:
    """A start tree with nested folders, links, an executable, a read-only folder, and a file named so
    that it sorts between a folder and that folder's entries (`lib`, `lib.txt`, `lib/a`)."""
    (root / "lib" / "a" / "b").mkdir(parents=True)
    (root / "lib" / "a" / "b" / "deep.py").write_text("X = 1\n")
    (root / "lib" / "a" / "link").symlink_to("b/deep.py")
    (root / "lib" / "dangling").symlink_to("missing")
    (root / "lib.txt").write_text("beside lib/\n")
    (root / "bin").mkdir()
    (root / "bin" / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    (root / "bin" / "tool.sh").chmod(0o755)
    (root / "ro").mkdir()
    (root / "ro" / "data.txt").write_text("data\n")
    (root / "ro").chmod(0o555)
    (root / "README.md").write_text("# rich\n")
    return root


RICH_CHANGES = {
    "an edit deep in folders left alone": "echo '# x' >> lib/a/b/deep.py",
    "a link retargeted": "ln -sfn /etc lib/a/link",
    "a read-only folder's entries": "chmod 755 ro && echo x > ro/new && rm ro/data.txt && chmod 555 ro",
    "an executable's mode": "chmod -x bin/tool.sh",
    "a file turned into a link": "rm bin/tool.sh && ln -s ../lib bin/tool.sh",
    "nested folders turned into a file": "rm -r lib && echo x > lib",
    "the deep edit again": "echo '# y' >> lib/a/b/deep.py",
    "a folder and the name sorting inside it": "rm -r lib lib.txt",
}


def test_a_reset_restores_links_modes_and_nested_folders_and_copies_nothing_else(
    make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    """Each change is undone, and an entry no change touched keeps its inode: a reset copies back what
    changed, never the whole tree (issue 36: one walk finds and repairs it all)."""
    sandbox = make_sandbox(rich_repo(tmp_path / "rich"))
    start = sandbox.run(SNAPSHOT).output
    untouched = sandbox.run("stat -c %i README.md").output
    for name, change in RICH_CHANGES.items():
        changed = sandbox.run(change)
        assert changed.exit_code == 0, (name, changed.output)
        assert sandbox.run(SNAPSHOT).output != start, name
        sandbox.reset()
        assert sandbox.run(SNAPSHOT).output == start, name
        assert sandbox.run("stat -c %i README.md").output == untouched, name


def test_a_write_right_after_a_reset_is_undone_by_the_next(sandbox: ExecutorSandbox) -> None:
    """Change times tick coarsely (milliseconds): a write in the reset's own tick would keep its mark."""
    start = sandbox.run(SNAPSHOT).output
    original = sandbox.read_file("pkg/calc.py")
    for _ in range(20):
        sandbox.reset()
        sandbox.write_file("pkg/calc.py", original.replace(b"a + b", b"a - b"))  # the same size
        sandbox.reset()
        assert sandbox.read_file("pkg/calc.py") == original
    assert sandbox.run(SNAPSHOT).output == start


MMAP_WRITE = """python3 -c '
import mmap, os
fd = os.open("pkg/calc.py", os.O_RDWR)
page = mmap.mmap(fd, 0)
page[:] = page[:].replace(b"a + b", b"a * b")  # read first: the read maps the page writable, no write fault
page.close()
os.close(fd)
'"""


def test_a_reset_restores_a_file_written_through_a_shared_mapping(sandbox: ExecutorSandbox) -> None:
    """Red team (docs/reliability.md 5j): a write through mmap kept the file's inode and, on tmpfs, its
    change time, so a reset left it as the agent made it and the next episode found it. A reset compares
    every file a process opened since the last one with its pristine copy."""
    original = sandbox.read_file("pkg/calc.py")
    written = sandbox.run(MMAP_WRITE)
    assert written.exit_code == 0, written.output
    assert sandbox.read_file("pkg/calc.py") == original.replace(b"a + b", b"a * b")
    sandbox.reset()
    assert sandbox.read_file("pkg/calc.py") == original
    for _ in range(2):  # and again, from a file the last reset left alone, and from one it copied back
        assert sandbox.run(MMAP_WRITE).exit_code == 0
        sandbox.reset()
        assert sandbox.read_file("pkg/calc.py") == original


def test_a_reset_compares_every_file_where_the_opened_ones_are_not_known(tmp_path: Path) -> None:
    """Where inotify is not to be had (or its queue overflowed) a reset compares every file: a write
    through a mapping that the marks alone miss is found either way."""
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))  # tmpfs, as a sandbox's /repo
    try:
        pristine, work = tmp_path / "pristine", shm / "work"
        (pristine / "pkg").mkdir(parents=True)
        (pristine / "pkg" / "calc.py").write_bytes(b"return a + b\n")
        big = bytes(range(256)) * (3 << 12)  # 3 MiB: read in more than one piece
        (pristine / "big.bin").write_bytes(big)
        for opened, restored in (({}, False), ({"pkg": {"calc.py"}, "": {"big.bin"}}, True), (None, True)):
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            copy_tree(str(pristine), str(work))
            marks: Marks = {}
            walk_marks(str(work), "", marks)
            with open(work / "pkg" / "calc.py", "r+b") as f, mmap.mmap(f.fileno(), 0) as page:
                page[:] = page[:].replace(b"a + b", b"a * b")
            with open(work / "big.bin", "r+b") as f, mmap.mmap(f.fileno(), 0) as page:
                page[-1] = page[-1] ^ 1  # the last byte
            restore_changed(str(work), str(pristine), marks, opened)
            assert ((work / "pkg" / "calc.py").read_bytes() == b"return a + b\n") == restored, opened
            assert ((work / "big.bin").read_bytes() == big) == restored, opened
    finally:
        shutil.rmtree(shm)


def test_the_opened_files_are_told_by_folder_and_a_folder_put_back_is_watched_again(tmp_path: Path) -> None:
    """What a reset compares: every file opened in a folder of the start tree, by any process, read-only
    or not, also in a folder that a reset copied back (a new inode, maybe with the old one's number)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("a\n")
    (tmp_path / "top.py").write_text("top\n")
    marks: Marks = {}
    walk_marks(str(tmp_path), "", marks)
    opened = Opened()
    opened.watch(str(tmp_path), marks)
    assert opened.take() == {}
    (tmp_path / "pkg" / "a.py").read_bytes()
    with open(tmp_path / "top.py", "r+b"):
        pass
    assert opened.take() == {"pkg": {"a.py"}, "": {"top.py"}}
    shutil.rmtree(tmp_path / "pkg")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("a\n")
    marks = {}
    walk_marks(str(tmp_path), "", marks)
    opened.watch(str(tmp_path), marks)
    opened.take()
    (tmp_path / "pkg" / "a.py").read_bytes()
    assert opened.take() == {"pkg": {"a.py"}}


def test_settle_waits_until_a_new_write_gets_a_later_change_time(tmp_path: Path) -> None:
    """On kernels whose change times tick coarsely, a reset waits out its own tick (on this one, with
    fine-grained times, the write-after-reset test passes without the wait)."""
    newest = time.time_ns() + 30_000_000
    began = time.monotonic()
    settle(str(tmp_path), newest)
    assert time.monotonic() - began >= 0.02
    assert list(tmp_path.iterdir()) == []


# ---- close ----------------------------------------------------------------------------------------


def test_close_is_safe_twice_and_a_closed_sandbox_is_unusable(
    sandbox: ExecutorSandbox, tmp_path: Path
) -> None:
    sandbox.close()
    sandbox.close()
    with pytest.raises(SandboxUnusable):
        sandbox.run("true")
    with pytest.raises(SandboxUnusable):
        sandbox.read_file("README.md")
    with pytest.raises(SandboxUnusable):
        sandbox.write_file("x", b"")
    with pytest.raises(SandboxUnusable):
        sandbox.copy_in(tmp_path, "/repo")
    with pytest.raises(SandboxUnusable):
        sandbox.copy_out("/repo", tmp_path / "out")
    with pytest.raises(SandboxUnusable):
        sandbox.reset()


# ---- closed by default ----------------------------------------------------------------------------


def status_fields(sandbox: ExecutorSandbox) -> dict[str, str]:
    text = sandbox.read_file("/proc/self/status").decode()
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def test_no_capabilities_no_new_privileges_not_root(sandbox: ExecutorSandbox) -> None:
    # /proc/self of a command, not of the executor: what the agent's processes get.
    result = sandbox.run("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status; id -u")
    fields = dict(line.split(":\t") for line in result.output.splitlines() if ":\t" in line)
    assert {name: int(value, 16) for name, value in fields.items() if name.startswith("Cap")} == {
        "CapInh": 0,
        "CapPrm": 0,
        "CapEff": 0,
        "CapBnd": 0,
        "CapAmb": 0,
    }
    assert fields["NoNewPrivs"] == "1"
    assert result.output.splitlines()[-1] == "1000"
    assert status_fields(sandbox)["CapEff"] == "0000000000000000"  # the executor too


@pytest.mark.parametrize("path", ["/usr/x", "/etc/x", "/x", "/opt/harness/executor.py"])
def test_everything_outside_repo_and_tmp_is_read_only(sandbox: ExecutorSandbox, path: str) -> None:
    result = sandbox.run(f"echo x > {path}")
    assert result.exit_code != 0
    assert "Read-only file system" in result.output or "Permission denied" in result.output


@pytest.mark.parametrize("folder", ["/repo", "/tmp"])
def test_programs_in_the_writable_folders_can_run(sandbox: ExecutorSandbox, folder: str) -> None:
    sandbox.write_file(f"{folder}/bin/hello.sh", b"#!/bin/sh\necho hello from $0\n")
    result = sandbox.run(f"chmod +x {folder}/bin/hello.sh && {folder}/bin/hello.sh")
    assert result.output == f"hello from {folder}/bin/hello.sh\n"


def test_repo_size_is_capped_with_a_clean_error(make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox(disk_mb=16, tmp_mb=16)
    for folder in ("/repo", "/tmp"):
        result = sandbox.run(f"head -c 40000000 /dev/zero > {folder}/big", timeout=20)
        assert result.exit_code != 0
        assert any(
            error in result.output
            for error in ("No space left on device", "File too large", "File size limit exceeded")
        ), result.output
        assert result.failure is None
        size = int(sandbox.run(["stat", "-c", "%s", f"{folder}/big"]).output)
        assert size <= 16 << 20
        assert sandbox.run(f"rm {folder}/big && echo freed").output == "freed\n"
    assert sandbox.run("echo still fine > /repo/ok && cat /repo/ok").output == "still fine\n"


def test_host_processes_and_files_are_out_of_sight(sandbox: ExecutorSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")

    listed = processes(sandbox)
    assert len(listed) == 2, listed
    assert listed[0].startswith("1 ") and "executor.py" in listed[0]
    assert "ps -e" in listed[1]

    for path in (
        str(secret),
        "/root/.bashrc",
        "/root/.gitconfig",
        "/work/shared/DESIGN.md",
        "/work/main/envs/sandbox.py",
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/etc/shadow",
    ):
        result = sandbox.run(["cat", path])
        assert result.exit_code != 0, f"{path} is readable in the sandbox: {result.output[:200]}"


OTHER_HOST_USER = 65534
"""A host user that is neither the harness's nor any sandbox's (nobody)."""


def connect_as(uid: int, path: Path) -> str:
    """What `connect` to the socket at `path` gave a process of host user `uid`: "connected" or the error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child only makes system calls, then leaves without Python's cleanup
        outcome = "connected"
        try:
            os.setgid(uid)
            os.setuid(uid)
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(str(path))
        except OSError as e:
            outcome = type(e).__name__
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as answer:
        return answer.read().decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another host user")
def test_no_other_host_user_nor_impostor_takes_a_starting_sandbox_socket(
    make_sandbox: MakeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team (docs/reliability.md 5j): a host user who watched the state folder connected to a new
    sandbox's socket before its executor and answered every command ("42 passed"). The socket's folder is
    the harness's (or the bwrap sandbox's host user's) alone, so another user cannot reach it; a process
    that can (root here) is hung up on, since it is not the sandbox's executor (SO_PEERCRED); the sandbox
    works."""
    seen: dict[str, object] = {}
    start = ExecutorSandbox.start

    def start_with_intruders(sandbox: ExecutorSandbox) -> None:
        listener = sandbox.channel.transport
        assert isinstance(listener, UnixListener)
        seen["other user"] = connect_as(OTHER_HOST_USER, listener.path)
        impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        impostor.connect(str(listener.path))  # before the executor, most likely: it starts a Python first
        impostor.sendall(b'{"ok": true, "hello": 1}\n')
        start(sandbox)
        impostor.settimeout(5)
        try:
            seen["impostor asked"] = impostor.recv(100)
        except ConnectionResetError:
            seen["impostor asked"] = b""

    monkeypatch.setattr(ExecutorSandbox, "start", start_with_intruders)
    sandbox = make_sandbox()
    assert seen == {"other user": "PermissionError", "impostor asked": b""}
    assert sandbox.run("echo the executor").output == "the executor\n"


def test_clearing_a_folder_spares_what_is_mounted_inside_it(tmp_path: Path) -> None:
    """A harness checked out under /tmp has its Python bound read-only into the sandbox's /tmp."""
    from envs.executor import clear_dir

    (tmp_path / "checkout" / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "checkout" / ".venv" / "bin" / "python").write_text("")
    (tmp_path / "checkout" / "junk.txt").write_text("x")
    (tmp_path / "scratch" / "deep").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    clear_dir(str(tmp_path), mounts={str(tmp_path / "checkout" / ".venv")})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "checkout",
        "checkout/.venv",
        "checkout/.venv/bin",
        "checkout/.venv/bin/python",
    ]


def harness_mounts_under_tmp(sandbox: ExecutorSandbox) -> set[str]:
    """What reset leaves in /tmp: on bwrap, the folders holding the harness's own Python when the
    checkout lives under /tmp (bound read-only there); nothing else."""
    from envs.bwrap import python_dirs

    if sandbox.backend != "bwrap":
        return set()
    return {Path(d).relative_to("/tmp").parts[0] for d in python_dirs() if d.startswith("/tmp/")}


def test_a_private_source_is_copied_once_per_run_and_again_when_it_changes(tmp_path: Path) -> None:
    """Docker mounts a source its unprivileged user cannot read as a readable copy, shared by the run's
    sandboxes instead of one copy per start (thousands of starts filled the disk)."""
    source = tmp_path / "source"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    source.chmod(0o700)
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    copies = {readable_source(source, run_dir) for _ in range(5)}

    assert len(copies) == 1 and list(run_dir.iterdir()) == list(copies)
    copy = copies.pop()
    assert (copy / "pkg" / "mod.py").read_text() == "x = 1\n" and copy.stat().st_mode & 0o005 == 0o005
    (source / "pkg" / "mod.py").write_text("x = 22\n")
    changed = readable_source(source, run_dir)
    assert changed != copy and (changed / "pkg" / "mod.py").read_text() == "x = 22\n"
    assert (copy / "pkg" / "mod.py").read_text() == "x = 1\n"  # a sandbox may still mount the old one
    source.chmod(0o755)
    assert readable_source(source, run_dir) == source
