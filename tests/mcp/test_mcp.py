"""`git lanes mcp` (SPEC §17.3, §17.6 MCP): the real server in a subprocess, spoken to with the official SDK's
own stdio client. Tools and their schemas; a whole batch driven through tools only (a failed attempt, a
correction through `instruct`); bad arguments to every tool write nothing; a tool call racing a CLI command
loses no update; a cancelled `done` writes nothing and leaves no check running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP SDK (git-lanes[mcp]) is not installed")
anyio = pytest.importorskip("anyio")

import mcp_types as types  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from conftest import git  # noqa: E402
from flow import child_of, cli, contains, intent, ok, record, write_plan  # noqa: E402
from helpers import deliver, snapshot_state  # noqa: E402

COORDINATOR_TOOLS = {"plan", "start", "status", "tick", "provision", "instruct", "review", "revise", "resume",
                     "integrate", "verify", "diff", "show", "log", "audit", "release", "receipts"}
LANE_TOOLS = {"task", "done", "give_up", "inbox"}


@asynccontextmanager
async def server(cwd: Path, *args: str, elicit=None):
    params = StdioServerParameters(command=str(Path(sys.executable).parent / "git-lanes"), args=["mcp", *args],
                                   cwd=str(cwd), env=dict(os.environ))
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, elicitation_callback=elicit,
                                     client_info=types.Implementation(name="test-agent", version="1")) as session:
                await session.initialize()
                yield session


async def call(session, name: str, **arguments):
    """(is_error, structured content) of one tool call."""
    result = await session.call_tool(name, arguments)
    return bool(result.is_error), result.structured_content


async def ok_call(session, name: str, **arguments):
    error, doc = await call(session, name, **arguments)
    assert not error, f"{name} refused: {doc}"
    return doc


def plan_one(repo: Path, check: str | None = None) -> None:
    write_plan(repo, "feat", {"a": intent("a", acceptance=[("A1", "greets", check or contains("src/a/out.txt",
                                                                                              "hello"))])})


def test_tools_schemas_and_resources(repo):
    schema = json.loads(subprocess.run(["git", "lanes", "schema", "batch_report"], cwd=repo, capture_output=True,
                                       text=True, check=True).stdout)

    async def main():
        async with server(repo) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert set(tools) == COORDINATOR_TOOLS   # not in a lane: no lane-side tools
            for t in tools.values():
                assert t.input_schema["type"] == "object" and t.input_schema["additionalProperties"] is False
                assert t.description
            assert tools["status"].output_schema == schema
            assert tools["tick"].output_schema == schema
            assert tools["start"].input_schema["properties"]["max_parallel"]["minimum"] == 1
            assert tools["instruct"].input_schema["properties"]["session_state"]["enum"] == \
                ["idle", "working", "blocked", "done"]
            templates = (await s.list_resource_templates()).resource_templates
            assert {t.uri_template for t in templates} == {"lanes://batch/{slug}", "lanes://lane/{slug}/{task}"}
            error, doc = await call(s, "task")
            assert error and doc["exit_code"] == 2 and "lane-side tool" in doc["detail"]

    anyio.run(main)


def test_a_whole_batch_through_tools_only(repo):
    plan_one(repo)

    async def main():
        async with server(repo) as plain:   # no --allow-yes, no elicitation: yes is not honoured
            doc = await ok_call(plain, "plan", slug="feat")
            assert doc["waves"] == [["a"]]
            before = snapshot_state(repo)
            error, doc = await call(plain, "start", slug="feat", yes=True)
            assert error and doc["code"] == "batch_confirmation_required" and doc["exit_code"] == 1
            assert "feat" in doc["confirmation"] and "--allow-yes" in doc["detail"]
            assert snapshot_state(repo) == before
        async with server(repo, "--allow-yes") as s:
            error, doc = await call(s, "start", slug="feat")   # no yes: what it would confirm
            assert error and doc["code"] == "batch_confirmation_required" and doc["confirmation"]
            report = await ok_call(s, "start", slug="feat", yes=True, qa_failure_limit=1)
            assert child_of(report, "a")["state"] == "pending"
            assert record(repo, "feat")["confirmed_by"] == {"actor": "agent", "confirmation_ref": "mcp:test-agent"}
            report = await ok_call(s, "provision", task="a")
            lane = Path(child_of(report, "a")["lane"]["path"])
            async with server(repo, "--lane", str(lane)) as ls:
                assert {t.name for t in (await ls.list_tools()).tools} == COORDINATOR_TOOLS | LANE_TOOLS
                info = await ok_call(ls, "task")
                assert info["task_id"] == "a"
                deliver(str(lane), {"src/a/out.txt": "bye\n"})
                progress = []

                async def seen(p, total, message):
                    progress.append(message)

                result = await ls.call_tool("done", {}, progress_callback=seen)
                assert result.is_error and result.structured_content["code"] == "qa_failed"
                assert result.structured_content["report"]["passed"] is False
                assert result.content[0].text.startswith("error: qa_failed: ")
                for _ in range(50):   # notifications reach the callback in a task of their own
                    if progress:
                        break
                    await anyio.sleep(0.1)
                assert progress == ["A1: failed"]
                report = await ok_call(s, "tick")
                assert child_of(report, "a")["correction_due"]
                report = await ok_call(s, "instruct", task="a", kind="correction", session_state="idle",
                                       message="write hello, not bye")
                assert report["lane_instruction"]["accepted"], report["lane_instruction"]
                inbox = await ok_call(ls, "inbox", ack=True)
                assert [i["text"] for i in inbox["items"]] == ["write hello, not bye"]
                deliver(str(lane), {"src/a/out.txt": "hello\n"})
                attempt = await ok_call(ls, "done")
                assert attempt["passed"] is True
            report = await ok_call(s, "tick")
            assert report["batch_state"] == "completed", report
            assert child_of(report, "a")["state"] == "integrated"
            report = await ok_call(s, "integrate")   # nothing left: the same report
            assert report["batch_state"] == "completed"
            verified = await ok_call(s, "verify")
            assert verified["passed"] is True
            shown = await ok_call(s, "show", task="a")
            assert len(shown["lane_record"]["qa_attempts"]) == 2
            entries = (await ok_call(s, "log"))["entries"]
            assert entries and all(set(e) == {"at", "actor", "summary", "commit"} for e in entries)
            resource = await s.read_resource("lanes://batch/feat")
            assert json.loads(resource.contents[0].text)["batch_state"] == "completed"
            resource = await s.read_resource("lanes://lane/feat/a")
            assert len(json.loads(resource.contents[0].text)["qa_attempts"]) == 2
        # the documents are exactly the CLI's
        assert ok(repo, "status")["batch_state"] == "completed"

    anyio.run(main)


BAD = {   # per tool: arguments the CLI would refuse as usage errors (exit 2)
    "plan": {"slug": "../x"}, "start": {"slug": "feat", "max_parallel": 0}, "status": {"slug": 7},
    "tick": {"offers": ["no-equals-sign"]}, "provision": {"task": "../x"},
    "instruct": {"task": "a", "message": "hi", "session_state": "asleep"},
    "review": {"task": "a", "verdict": "maybe"}, "revise": {"task": "a", "intent": "/nonexistent/intent.toml"},
    "resume": {"slug": "feat", "restart": "a"}, "integrate": {"tasks": ["nope"]}, "verify": {"commit": ""},
    "diff": {"task": "nope"}, "show": {}, "log": {"slug": ""}, "audit": {"slug": ["feat"]},
    "release": {"keep_branch": "yes"}, "task": {"extra": 1}, "done": {"usage": {"cost_usd": -1}}, "give_up": {"message": ""},
    "inbox": {"ack": 1}, "receipts": {"prune": -1},
}


def test_bad_arguments_to_every_tool_write_nothing(repo):
    plan_one(repo)
    ok(repo, "start", "feat", "--yes")
    lane = Path(child_of(ok(repo, "provision", "a"), "a")["lane"]["path"])
    deliver(str(lane), {"src/a/out.txt": "bye\n"})

    async def main():
        async with server(repo, "--lane", str(lane), "--allow-yes") as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert names == set(BAD)
            before = snapshot_state(repo), git(lane, "status", "--porcelain")
            for name, args in BAD.items():
                for bad in (args, {**args, "bogus": True}):
                    error, doc = await call(s, name, **bad)
                    assert error and doc["exit_code"] == 2, (name, bad, doc)
                    assert set(doc) >= {"code", "detail", "exit_code"}
            assert (snapshot_state(repo), git(lane, "status", "--porcelain")) == before

    anyio.run(main)


def test_a_tool_call_racing_a_cli_command_loses_no_update(repo):
    plan_one(repo)
    lane = None

    async def main():
        nonlocal lane

        async def accept(context, params):   # the client asks its user: elicitation, no yes needed
            assert "feat" in params.message
            return types.ElicitResult(action="accept", content={"confirm": True})

        async with server(repo, elicit=accept) as s:
            await ok_call(s, "start", slug="feat")
            assert record(repo, "feat")["confirmed_by"]["actor"] == "user"
            report = await ok_call(s, "provision", task="a")
            lane = Path(child_of(report, "a")["lane"]["path"])

            def by_cli(n):
                for i in range(n):
                    code, doc, err = cli(repo, "instruct", "a", "--session-state", "idle", "-m", f"cli {i}")
                    assert code == 0, err

            async def by_tool(n):
                for i in range(n):
                    await ok_call(s, "instruct", task="a", session_state="idle", message=f"tool {i}")

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, by_cli, 4)
                tg.start_soon(by_tool, 4)
        texts = [i["text"] for i in ok(lane, "inbox")]
        assert sorted(texts) == sorted([f"cli {i}" for i in range(4)] + [f"tool {i}" for i in range(4)])

    anyio.run(main)


def test_a_cancelled_done_writes_nothing_and_kills_its_checks(repo, tmp_path):
    pidfile = tmp_path / "check.pid"
    slow = f"python3 -c \"import os,time; open('{pidfile}','w').write(str(os.getpid())); time.sleep(60)\""
    plan_one(repo, check=slow)
    ok(repo, "start", "feat", "--yes")
    lane = Path(child_of(ok(repo, "provision", "a"), "a")["lane"]["path"])
    deliver(str(lane), {"src/a/out.txt": "hello\n"})
    before = snapshot_state(repo)

    async def main():
        async with server(lane) as s:   # started inside the lane: the lane-side tools are there
            scope = anyio.CancelScope()

            async def run_done():
                with scope:
                    finished.append(await s.call_tool("done", {}))

            finished = []

            async with anyio.create_task_group() as tg:
                tg.start_soon(run_done)
                deadline = time.monotonic() + 20
                while not pidfile.exists() and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                assert pidfile.exists(), f"the check never started: {finished}"
                await anyio.sleep(0.2)
                scope.cancel()
            # the server goes on answering once the interrupted call is over
            info = await ok_call(s, "task")
            assert info["task_id"] == "a"

    anyio.run(main)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "the check outlived the cancelled call"
    assert snapshot_state(repo) == before   # no attempt recorded (the lane record ref did not move)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (exited, not reaped by its parent yet) is gone for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_declined_elicitation_writes_nothing_and_an_accepted_one_records_the_budget(repo):
    plan_one(repo)
    answers = ["decline", "accept"]

    async def main():
        async def ask(context, params):
            action = answers.pop(0)
            return types.ElicitResult(action=action, content={"confirm": True} if action == "accept" else None)

        async with server(repo, "--allow-yes", elicit=ask) as s:
            before = snapshot_state(repo)
            error, doc = await call(s, "start", slug="feat", yes=True)   # elicitation first, even with yes
            assert error and doc["code"] == "batch_confirmation_declined" and doc["exit_code"] == 1
            assert snapshot_state(repo) == before
            await ok_call(s, "start", slug="feat", budget_usd=2.5, budget_tokens=9000)
        stored = record(repo, "feat")
        assert stored["budget"]["max_cost_usd"] == 2.5 and stored["budget"]["max_tokens"] == 9000
        assert stored["confirmed_by"] == {"actor": "user", "confirmation_ref": "mcp:test-agent"}

    anyio.run(main)
