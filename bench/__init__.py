"""git-lanes benchmark suite: every measure a ratio against a baseline run in the same process tree.

    python -m bench                      # every benchmark, 5 runs each (about 10 minutes on 2 cores)
    python -m bench --quick              # every benchmark at its smallest size, 1 run (a smoke run)
    python -m bench --only startup,idle_tick --runs 7
    python -m bench --json               # one JSON document: {benchmarks: [...], meta: {...}}
    python -m bench.profile ...          # where the time goes (cProfile, Git calls, imports)

Run it with the interpreter git-lanes is installed in (its `git-lanes` script is the one timed).
Each benchmark works in a hermetic temporary world (own HOME, `GIT_CONFIG_NOSYSTEM=1`, fixed
identities, gc off), by default in RAM (`/dev/shm`) so that the figures measure git-lanes and
Git, not the machine's disk. Modules: `common` (world, repository builders, timing,
statistics), then one module per family: `startup`, `state`, `integration`, `run` (CPU per
task, makespan, shared slow check), `realistic`; `profile` is the profiling tool.
"""
