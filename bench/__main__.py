"""python -m bench [--json] [--runs N] [--only NAME,...] [--quick] [--list] [--keep] [--tmp DIR]

Runs the benchmark suite and prints every ratio (measured / baseline) with its median and
spread (min-max) over the runs. `--json` prints one JSON document instead:
`{benchmarks: [{name, ratio: {median, min, max}, runs, detail: {...}}], meta: {...}}`.
Exit 1 when a benchmark could not measure (its entry then has `error` instead of `ratio`);
targets are printed, never enforced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from . import integration, realistic, run, startup, state, verification
from .common import BenchError, Result, World


@dataclass(frozen=True)
class Family:
    """One measurement that yields one or more named results."""
    name: str
    results: tuple[str, ...]
    measure: Callable[[World, int, bool], list[Result]]


FAMILIES = (
    Family("startup", ("startup", "lane_task_json", "done_startup"), startup.measure),
    Family("state", ("state_write_amplification", "idle_tick"), state.measure),
    Family("integration", ("integration_first_cold", "integration_first_warm", "integration_marginal"),
           integration.measure),
    Family("cpu", ("cpu_per_task",), run.measure_cpu),
    Family("makespan", ("run_makespan",), run.measure_makespan),
    Family("shared", ("shared_slow_check",), run.measure_shared),
    Family("realistic", ("realistic_batch",), realistic.measure),
    Family("verify_once", ("verify_once",), verification.verify_once),
    Family("realistic_v4", ("realistic_v4_speedup", "realistic_inputs_speedup"), verification.realistic_speedups),
    Family("landing", ("landing_inputs", "landing_inputs_trusted"), verification.landing),
    Family("parallel_landing", ("parallel_landing",), verification.parallel_landing),
)


def _tmp_default() -> str | None:
    """RAM (tmpfs) when there is one: the figures then measure git-lanes, not the disk's writeback."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize > 4 << 30:
            return shm
    return None


def _select(only: str | None) -> list[Family]:
    if not only:
        return list(FAMILIES)
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    known = {f.name for f in FAMILIES} | {r for f in FAMILIES for r in f.results}
    unknown = sorted(wanted - known)
    if unknown:
        raise SystemExit(f"error: unknown benchmark(s): {', '.join(unknown)}; see --list")
    return [f for f in FAMILIES if f.name in wanted or wanted & set(f.results)]


def _wanted(family: Family, only: str | None) -> set[str]:
    if not only:
        return set(family.results)
    wanted = {w.strip() for w in only.split(",")}
    return set(family.results) if family.name in wanted else wanted & set(family.results)


def _meta(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return {"python": sys.executable, "python_version": platform.python_version(), "git": git,
            "cpus": os.cpu_count(), "runs": args.runs, "quick": args.quick, "tmp": tmp,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _fmt_target(detail: dict[str, Any]) -> str:
    target = detail.get("target")
    if target is None:
        return "none set"
    return f"<= {target}" if isinstance(target, (int, float)) else str(target)


def _print_row(entry: dict[str, Any]) -> None:
    name = entry["name"]
    if "error" in entry:
        print(f"{name:<28} ERROR: {entry['error']}", flush=True)
        return
    r, d = entry["ratio"], entry["detail"]
    now = f"  (issue: {d['issue_now']})" if "issue_now" in d else ""
    print(f"{name:<28} {r['median']:7.2f}x  [{r['min']:.2f}-{r['max']:.2f}]  n={entry['runs']}  "
          f"target {_fmt_target(d)}{now}", flush=True)
    print(f"{'':<28} {d.get('what', '')}; baseline: {d.get('baseline', '')}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--runs", type=int, default=None, help="runs of each benchmark (default 5; --quick: 1)")
    ap.add_argument("--only", metavar="NAME,...", help="benchmarks or families to run (see --list)")
    ap.add_argument("--quick", action="store_true", help="small sizes and 1 run: a smoke run")
    ap.add_argument("--list", action="store_true", help="list the families and their benchmarks")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--tmp", metavar="DIR", help="where the temporary directory goes (default: /dev/shm when it "
                    "is a big enough tmpfs, else the system's temporary directory)")
    args = ap.parse_args(argv)
    if args.list:
        for f in FAMILIES:
            print(f"{f.name}: {', '.join(f.results)}")
        return 0
    if args.runs is None:
        args.runs = 1 if args.quick else 5
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    families = _select(args.only)
    tmp = args.tmp or _tmp_default() or tempfile.gettempdir()
    tempfile.tempdir = tmp
    entries: list[dict[str, Any]] = []
    failed = False
    for family in families:
        wanted = _wanted(family, args.only)
        started = time.monotonic()
        with World(keep=args.keep) as world:
            if args.keep:
                print(f"# {family.name}: kept in {world.root}", file=sys.stderr, flush=True)
            try:
                results = [r for r in family.measure(world, args.runs, args.quick) if r.name in wanted]
                new = [r.to_json() for r in results]
            except BenchError as exc:
                failed = True
                new = [{"name": name, "error": str(exc)} for name in family.results if name in wanted]
            except Exception as exc:  # a bug in a benchmark: say where, go on with the others
                failed = True
                tb = traceback.format_exc(limit=3)
                new = [{"name": name, "error": f"{type(exc).__name__}: {exc}", "traceback": tb}
                       for name in family.results if name in wanted]
        took = round(time.monotonic() - started, 1)
        for entry in new:
            entry.setdefault("detail", {})["family_s"] = took
            entries.append(entry)
            if not args.json:
                _print_row(entry)
    if args.json:
        print(json.dumps({"benchmarks": entries, "meta": _meta(args, tmp)}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
