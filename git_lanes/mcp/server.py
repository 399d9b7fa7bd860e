"""The stdio server on the official `mcp` SDK (SPEC §17.3): lists the tools and resources, validates each
call's arguments against its schema, runs it as one fresh command in a worker thread (`calls.Call`), and
answers with its document or its refusal. Imported only by `git lanes mcp`."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp_types as types
from jsonschema import Draft202012Validator
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from .. import __version__
from ..core.errors import usage
from .calls import Call, Client, refusal
from .tools import TOOLS, Tool, input_schema, output_schema

CONFIRM_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Proceed?",
                                                               "default": False}},
                  "required": ["confirm"]}
TEMPLATES = (("lanes://batch/{slug}", "batch report", "The report of a slug's latest batch (git lanes status)."),
             ("lanes://lane/{slug}/{task}", "lane record", "A child's lane record (as git lanes show gives it)."))


def in_lane(cwd: str) -> bool:
    """Whether `cwd` is a lane worktree (on an imm-lane/ branch)."""
    from ..domain.session import LANE_PREFIX, Session

    try:
        branch = Session(cwd=cwd, warn=lambda _t: None, lane_side=True).current_branch()
    except Exception:   # not a repository: the tools say so when called
        return False
    return bool(branch) and branch.startswith(LANE_PREFIX)


class LanesServer:
    def __init__(self, cwd: str, lane: str | None, allow_yes: bool) -> None:
        self.cwd = cwd
        self.lane = os.path.abspath(lane) if lane else (cwd if in_lane(cwd) else None)
        self.allow_yes = allow_yes
        self.tools = {t.name: t for t in TOOLS if self.lane is not None or not t.lane}
        self.server = Server("git-lanes", version=__version__, on_list_tools=self.list_tools,
                             on_call_tool=self.call_tool, on_list_resources=self.list_resources,
                             on_list_resource_templates=self.list_templates, on_read_resource=self.read_resource)

    async def list_tools(self, ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=t.name, description=t.description,
                                                       input_schema=input_schema(t), output_schema=_out(t))
                                            for t in self.tools.values()])

    async def call_tool(self, ctx, params) -> types.CallToolResult:
        tool = self.tools.get(params.name)
        args = dict(params.arguments or {})
        call = Call(cwd=self.cwd, lane=self.lane, client=self._client(ctx, tool))
        try:
            if tool is None:
                raise usage(f"unknown tool {params.name!r}" + (" (a lane-side tool: start the server in a lane, "
                                                                "or with --lane PATH)" if _lane_tool(params.name)
                                                                else ""))
            _validate(tool, args)
            doc = await self._run(call, tool, args)
        except BaseException as exc:   # noqa: BLE001 (KeyboardInterrupt: the call was interrupted)
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            return _refused(refusal(exc), call.warnings)
        structured = {tool.wrap: doc} if tool.wrap else doc
        text = json.dumps(doc, indent=2, ensure_ascii=False)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)] + _warnings(call.warnings),
                                    structured_content=structured)

    async def _run(self, call: Call, tool: Tool, args: dict[str, Any]) -> Any:
        """The tool in a worker thread; cancelled, it is interrupted as by Ctrl-C and waited for."""
        finished = anyio.Event()
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["doc"] = call.run(lambda: tool.run(call, args))
            except BaseException as exc:   # noqa: BLE001 (carried back to the event loop)
                box["exc"] = exc
            finally:
                anyio.from_thread.run_sync(finished.set)

        try:
            await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
            await finished.wait()
        except anyio.get_cancelled_exc_class():
            call.interrupt()
            with anyio.CancelScope(shield=True):
                await finished.wait()
            raise
        if "exc" in box:
            raise box["exc"]
        return box["doc"]

    def _client(self, ctx, tool: Tool | None) -> Client:
        info = ctx.session.client_params.client_info if ctx.session.client_params else None
        caps = ctx.session.client_capabilities
        elicit = None
        if caps is not None and caps.elicitation is not None:
            def elicit(text: str) -> bool | None:
                try:
                    answer = anyio.from_thread.run(ctx.session.elicit_form, text + "\n\nProceed?", CONFIRM_SCHEMA,
                                                   ctx.request_id)
                except Exception:   # the client could not ask after all: as if it had no elicitation
                    return None
                return answer.action == "accept" and bool((answer.content or {}).get("confirm"))
        progress = None
        if tool is not None and tool.long:
            def progress(n: float, message: str) -> None:
                try:
                    anyio.from_thread.run(ctx.session.report_progress, n, None, message)
                except Exception:   # a notification that cannot be sent stops nothing
                    pass
        return Client(info.name if info else "unknown", self.allow_yes, elicit, progress)

    # -- resources ------------------------------------------------------------------------------------

    async def list_resources(self, ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def list_templates(self, ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template=uri, name=name, description=text, mime_type="application/json")
            for uri, name, text in TEMPLATES])

    async def read_resource(self, ctx, params) -> types.ReadResourceResult:
        from ..batch import status as views

        uri = str(params.uri)
        parts = uri.removeprefix("lanes://").split("/") if uri.startswith("lanes://") else []
        call = Call(cwd=self.cwd, lane=self.lane, client=self._client(ctx, None))
        if len(parts) == 2 and parts[0] == "batch":
            fn = lambda: views.status(call.session(), parts[1])   # noqa: E731
        elif len(parts) == 3 and parts[0] == "lane":
            fn = lambda: views.show(call.session(), parts[1], parts[2])["lane_record"]   # noqa: E731
        else:
            raise ValueError(f"unknown resource {uri} (lanes://batch/<slug>, lanes://lane/<slug>/<task>)")
        from ..core.ids import check_id

        for part in parts[1:]:
            check_id(part, "slug or task id")
        doc = await anyio.to_thread.run_sync(lambda: call.run(fn))
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type="application/json", text=json.dumps(doc, indent=2, ensure_ascii=False))])


def _out(tool: Tool) -> dict[str, Any] | None:
    return output_schema(tool)


def _lane_tool(name: str) -> bool:
    return any(t.name == name and t.lane for t in TOOLS)


def _validate(tool: Tool, args: dict[str, Any]) -> None:
    """Arguments as the command line takes them: the schema's types, ranges and choices (exit 2)."""
    errors = sorted(Draft202012Validator(input_schema(tool)).iter_errors(args), key=lambda e: list(e.path))
    if not errors:
        return
    e = errors[0]
    where = ".".join(str(p) for p in e.path) or (
        ", ".join(sorted(set(args) - set(tool.properties))) if e.validator == "additionalProperties" else
        e.message.split("'")[1] if e.validator == "required" else tool.name)
    raise usage(f"invalid {where}: {e.message}")


def _warnings(warnings: list[str]) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=f"warning: {w}") for w in warnings]


def _refused(doc: dict[str, Any], warnings: list[str]) -> types.CallToolResult:
    line = doc.pop("error")
    text = line + (f"\nhint: {doc['hint']}" if doc.get("hint") else "")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)] + _warnings(warnings),
                                structured_content=doc, is_error=True)


def serve(cwd: str, lane: str | None, allow_yes: bool) -> None:
    """Serve on stdin/stdout until the client goes."""
    lanes = LanesServer(cwd, lane, allow_yes)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await lanes.server.run(read, write, lanes.server.create_initialization_options())

    anyio.run(main)
