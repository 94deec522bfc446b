"""sandboxd's protocol and bash tool, run as a local subprocess (no Docker)."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _sandboxd_local import LocalDaemon

from edge_agent.sandbox.sandboxd import PROTOCOL_VERSION
from edge_agent.sandbox.sandboxd.bash import BASH_OUTPUT_LIMIT
from tests.support import eventually_sync


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[LocalDaemon]:
    d = LocalDaemon(tmp_path)
    yield d
    d.close()


def test_hello(daemon: LocalDaemon, tmp_path: Path) -> None:
    assert daemon.hello["event"] == "hello"
    assert daemon.hello["protocol"] == PROTOCOL_VERSION
    assert daemon.hello["root"] == os.path.realpath(tmp_path)


def test_cwd_and_exported_env_persist(daemon: LocalDaemon, tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    assert daemon.call("bash", {"command": f"cd {sub} && export X=1"}) == ("(no output)", False)
    assert daemon.call("bash", {"command": "echo $X; pwd"}) == (f"1\n{sub}", False)


def test_starts_in_workspace_with_dumb_terminal(daemon: LocalDaemon, tmp_path: Path) -> None:
    text, is_error = daemon.call("bash", {"command": 'pwd; echo "$TERM" "[$PS1]"'})
    assert (text, is_error) == (f"{os.path.realpath(tmp_path)}\ndumb []", False)


def test_output_without_trailing_newline(daemon: LocalDaemon) -> None:
    assert daemon.call("bash", {"command": "printf abc"}) == ("abc", False)
    assert daemon.call("bash", {"command": "printf 'a\\n\\nb\\n\\n'"}) == ("a\n\nb", False)


def test_stderr_is_merged(daemon: LocalDaemon) -> None:
    assert daemon.call("bash", {"command": "echo out; echo err >&2"}) == ("out\nerr", False)


def test_nonzero_exit_is_error_with_output(daemon: LocalDaemon) -> None:
    assert daemon.call("bash", {"command": "echo nope; exit_code() { return 3; }; exit_code"}) == (
        "nope",
        True,
    )
    assert daemon.call("bash", {"command": "false"}) == ("(no output)", True)


def test_syntax_error_does_not_hang(daemon: LocalDaemon) -> None:
    started = time.monotonic()
    text, is_error = daemon.call("bash", {"command": 'echo "unbalanced'}, timeout_ms=5000)
    assert is_error and "unexpected EOF" in text
    assert time.monotonic() - started < 2
    assert daemon.call("bash", {"command": "echo still here"}) == ("still here", False)


def test_stdin_is_dev_null(daemon: LocalDaemon) -> None:
    assert daemon.call("bash", {"command": "cat; read x; echo done"}, timeout_ms=5000) == ("done", False)


def test_quotes_heredocs_and_multiline(daemon: LocalDaemon) -> None:
    command = "cat <<'EOF'\nit's $HOME\nEOF\nprintf '%s\\n' \"a'b\""
    assert daemon.call("bash", {"command": command}) == ("it's $HOME\na'b", False)


def test_ansi_escapes_stripped(daemon: LocalDaemon) -> None:
    text, _ = daemon.call("bash", {"command": r"printf '\033[31mred\033[0m \033]0;title\007done\n'"})
    assert text == "red done"


def test_output_tail_truncated_with_marker(daemon: LocalDaemon) -> None:
    text, is_error = daemon.call("bash", {"command": "seq 1 100000"})
    assert not is_error
    assert text.startswith("[output truncated]\n")
    assert text.endswith("\n100000")
    assert len(text.encode()) <= BASH_OUTPUT_LIMIT + len("[output truncated]\n")


def test_timeout_kills_and_restarts_lazily(daemon: LocalDaemon, tmp_path: Path) -> None:
    daemon.call("bash", {"command": "cd /"})
    started = time.monotonic()
    text, is_error = daemon.call("bash", {"command": "sleep 30"}, timeout_ms=300)
    assert (text, is_error) == ("bash: bash command timed out after 0.3s", True)
    assert time.monotonic() - started < 3
    # A fresh shell: back in the workspace.
    assert daemon.call("bash", {"command": "pwd"}) == (os.path.realpath(tmp_path), False)


def test_timeout_kills_background_jobs_of_the_group(daemon: LocalDaemon, tmp_path: Path) -> None:
    marker = tmp_path / "survivor"
    daemon.call("bash", {"command": f"(sleep 0.5; touch {marker}) & sleep 30"}, timeout_ms=100)
    time.sleep(1.0)  # past the moment a surviving job would have written the marker
    assert not marker.exists()


def test_restart(daemon: LocalDaemon) -> None:
    daemon.call("bash", {"command": "export Y=2"})
    assert daemon.call("bash", {"restart": True}) == ("bash session restarted", False)
    assert daemon.call("bash", {"command": 'echo "[$Y]"'}) == ("[]", False)


def test_missing_command(daemon: LocalDaemon) -> None:
    assert daemon.call("bash", {}) == ("bash: command is required", True)
    assert daemon.call("bash", {"command": ""}) == ("bash: command is required", True)


def test_exit_ends_shell_and_next_call_gets_a_new_one(daemon: LocalDaemon) -> None:
    assert daemon.call("bash", {"command": "echo bye; exit 4"}) == ("bye", True)
    assert daemon.call("bash", {"command": "echo again"}) == ("again", False)


def test_file_tools_run_while_bash_is_busy(daemon: LocalDaemon) -> None:
    slow = daemon.submit("bash", {"command": "sleep 1; echo slow"})
    fast = daemon.submit("write", {"file_path": "f.txt", "content": "x"})
    first = daemon.read()
    assert first["id"] == fast
    second = daemon.read()
    assert second["id"] == slow and second["content"][0]["text"] == "slow"


def test_bash_calls_are_serialized_in_order(daemon: LocalDaemon) -> None:
    ids = [daemon.submit("bash", {"command": f"sleep 0.0{i}; echo {i}"}) for i in range(5)]
    answers = [daemon.read() for _ in ids]
    assert [a["id"] for a in answers] == ids
    assert [a["content"][0]["text"] for a in answers] == [str(i) for i in range(5)]


def test_cancel_running_command(daemon: LocalDaemon) -> None:
    req_id = daemon.submit("bash", {"command": "sleep 30"})
    daemon.send({"cancel": req_id})  # running or still queued: either way it is answered at once
    answer = daemon.read()
    assert answer["id"] == req_id and answer["is_error"]
    assert answer["content"][0]["text"] == "bash: command cancelled"
    assert daemon.call("bash", {"command": "echo ok"}) == ("ok", False)


def test_bad_frames_do_not_kill_the_daemon(daemon: LocalDaemon) -> None:
    for payload in (b"not json", b"[1, 2]", b'{"tool": "bash"}', b"\xff\xfe"):
        daemon.write(struct.pack(">I", len(payload)) + payload)
        answer = daemon.read()
        assert answer["id"] is None and answer["is_error"]
    daemon.send({"id": 7, "tool": "bash", "input": "echo"})
    assert daemon.read()["is_error"]
    daemon.send({"id": 8, "tool": "rm -rf", "input": {}})
    answer = daemon.read()
    assert answer["is_error"] and answer["content"][0]["text"] == "unknown tool 'rm -rf'"
    daemon.send({"id": 9, "tool": "bash", "input": {"command": 5}})
    assert daemon.read()["content"][0]["text"] == "bash: field 'command' must be a string"
    assert daemon.call("bash", {"command": "echo alive"}) == ("alive", False)


def test_eof_stops_daemon_and_its_shell(tmp_path: Path) -> None:
    d = LocalDaemon(tmp_path)
    text, _ = d.call("bash", {"command": "echo $$"})
    shell_pid = int(text)
    assert d.close() == 0

    def shell_gone() -> bool:
        try:
            os.kill(shell_pid, 0)
        except ProcessLookupError:
            return True
        return False

    eventually_sync(shell_gone, 5, "the shell to exit with its daemon")
