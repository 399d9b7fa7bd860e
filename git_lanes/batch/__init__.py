"""The coordinator's use cases: start, provision and release, resume and retire, revise, status, verify, audit, diff."""
