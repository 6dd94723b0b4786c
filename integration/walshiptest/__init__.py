"""Shared helpers of walship's Python integration tests, drill, benchmark and
fault campaign, one implementation of each:

  procs     starting programs so that they can be stopped by their PID
            (process groups), stopping and killing them, their logs, log()
  daemons   walship-agent and walship-replica (port 0 and --port-file)
  pg        PostgreSQL 15 clusters, the OS user they run as, psql sessions
  patroni   a three-node Patroni + etcd cluster of PostgreSQL 15, "hosts"
  waits     bounded waits (wait_until)
  lsn       LSNs and WAL segment names
  ports     port files; free_port() only where a program cannot take port 0
  binaries  where the built binaries are
  stats     percentiles for reports
  witness   hard links to every log file a database writes, as it appears
  loopfs    an ext4 of a test's own on a loop device, its I/O counted

Import modules from here as `from integration.walshiptest import waits`: under
`bazel test` the runfiles root is on sys.path; for manual runs, run from the
repository root with `python3 -m integration.<module>`.
"""
