"""Shared helpers of walship's Python integration tests, drill, benchmark and
fault campaign: bounded waits (waits), LSNs and WAL segment names (lsn), the
built binaries (binaries), ports and port files (ports).

Import modules from here as `from integration.walshiptest import waits`: under
`bazel test` the runfiles root is on sys.path; for manual runs, run from the
repository root with `python3 -m integration.<module>`.
"""
